// Results: one Row per measured case, printed as an aligned table while the run goes and written
// as JSON at the end.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "grid.h"

namespace flashattn::bench {

struct Row {
  Case c;
  std::string backend;  // what ran: "cpu", "fa2", "fa3", "auto(cuda)"
  std::string dtype;
  double median_ms = 0, min_ms = 0;
  int repeats = 0;
  double tflops = 0;  // by the FLOP convention in grid.h, from the median
  double gbps = 0;    // minimum bytes moved (kvcache: K+V read) / median time
  // Memory the backend allocated for itself beyond inputs and outputs (CPU: workspace peak).
  std::optional<std::size_t> extra_bytes;
  // The naive O(N^2)-memory reference beside the tiled path (CPU forward only).
  std::optional<double> naive_ms;
  std::optional<std::size_t> naive_score_bytes;  // sq*sk*8 per (batch, head) it works on at once
  std::optional<double> max_abs_err;             // tiled output vs the float64 reference
  std::string naive_note;                        // why the naive columns are empty, when they are
};

struct RunInfo {
  std::string library_version;
  std::string date_utc;  // when the run started, ISO 8601
  std::string device;  // "cpu (N threads)" or the GPU's name and arch
  std::string grid;    // grid name or "shape"
  std::string dtype;
  int warmup = 0, repeats = 0, threads = 0;
};

// Human-readable byte counts: "512 B", "3.0 KiB", "12.5 MiB".
std::string format_bytes(std::size_t bytes);

class TablePrinter {
 public:
  explicit TablePrinter(std::FILE* out, bool with_naive) : out_(out), with_naive_(with_naive) {}
  void header() const;
  void row(const Row& r) const;

 private:
  std::FILE* out_;
  bool with_naive_;
};

// Writes {"info": {...}, "rows": [...]} to path; false (and *error) when the file cannot be written.
// Rows carry the table's columns; a kvcache row has "kvcache": true, "page_size" (0: dense) and
// "append", other rows false, null and false.
bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                std::string* error);

}  // namespace flashattn::bench
