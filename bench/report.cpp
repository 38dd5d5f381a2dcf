#include "report.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace flashattn::bench {

std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  return buf;
}

namespace {

std::string optional_ms(const std::optional<double>& ms) {
  if (!ms) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", *ms);
  return buf;
}

std::string optional_bytes(const std::optional<std::size_t>& bytes) {
  return bytes ? format_bytes(*bytes) : "-";
}

// "-" without a KV cache (fwd), "dense", or the page size.
std::string page_cell(const Shape& s) {
  if (!s.kvcache) return "-";
  return s.kvcache->page_size == 0 ? "dense" : std::to_string(s.kvcache->page_size);
}

std::string optional_err(const std::optional<double>& err) {
  if (!err) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", *err);
  return buf;
}

}  // namespace

void TablePrinter::header() const {
  // New columns go last: scripts read the others by position (tools/gpu/fa2_tiles.sh).
  std::fprintf(out_, "%-10s %-8s %5s %8s %8s %5s %5s %4s %6s %4s %11s %9s %9s %11s %5s %6s", "backend",
               "dtype", "batch", "seqlen_q", "seqlen_k", "h_q", "h_k", "d", "causal", "dir",
               "median_ms", "TFLOP/s", "GB/s", "extra_mem", "page", "append");
  if (with_naive_)
    std::fprintf(out_, " | %11s %12s %9s", "naive_ms", "naive_scores", "max_err");
  std::fprintf(out_, "\n");
  std::fflush(out_);
}

void TablePrinter::row(const Row& r) const {
  const Shape& s = r.c.shape;
  std::fprintf(out_, "%-10s %-8s %5lld %8lld %8lld %5lld %5lld %4lld %6d %4s %11.3f %9.4g %9.1f %11s %5s %6s",
               r.backend.c_str(), r.dtype.c_str(), (long long)s.batch, (long long)s.seqlen_q,
               (long long)s.seqlen_k, (long long)s.heads_q, (long long)s.heads_k,
               (long long)s.head_dim, int(s.causal), direction_name(r.c.direction), r.median_ms,
               r.tflops, r.gbps, optional_bytes(r.extra_bytes).c_str(), page_cell(s).c_str(),
               s.kvcache ? (s.kvcache->append ? "1" : "0") : "-");
  if (with_naive_) {
    std::fprintf(out_, " | %11s %12s %9s", optional_ms(r.naive_ms).c_str(),
                 optional_bytes(r.naive_score_bytes).c_str(), optional_err(r.max_abs_err).c_str());
    if (!r.naive_note.empty()) std::fprintf(out_, "  (%s)", r.naive_note.c_str());
  }
  std::fprintf(out_, "\n");
  std::fflush(out_);
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

// JSON has no inf/nan: those become null.
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

template <typename T>
std::string json_optional(const std::optional<T>& x) {
  if (!x) return "null";
  if constexpr (std::is_floating_point_v<T>)
    return json_number(*x);
  else
    return std::to_string(*x);
}

}  // namespace

bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                std::string* error) {
  std::ofstream out(path);
  if (!out) {
    *error = "cannot open '" + path + "' for writing";
    return false;
  }
  out << "{\n  \"info\": {"
      << "\"library_version\": " << json_string(info.library_version)
      << ", \"date_utc\": " << json_string(info.date_utc)
      << ", \"device\": " << json_string(info.device) << ", \"grid\": " << json_string(info.grid)
      << ", \"dtype\": " << json_string(info.dtype) << ", \"warmup\": " << info.warmup
      << ", \"repeats\": " << info.repeats << ", \"threads\": " << info.threads << "},\n"
      << "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Shape& s = r.c.shape;
    out << (i ? ",\n" : "\n") << "    {\"backend\": " << json_string(r.backend)
        << ", \"dtype\": " << json_string(r.dtype) << ", \"batch\": " << s.batch
        << ", \"seqlen_q\": " << s.seqlen_q << ", \"seqlen_k\": " << s.seqlen_k
        << ", \"heads_q\": " << s.heads_q << ", \"heads_k\": " << s.heads_k
        << ", \"head_dim\": " << s.head_dim << ", \"causal\": " << (s.causal ? "true" : "false")
        << ", \"direction\": " << json_string(direction_name(r.c.direction))
        << ", \"median_ms\": " << json_number(r.median_ms) << ", \"min_ms\": " << json_number(r.min_ms)
        << ", \"repeats\": " << r.repeats << ", \"tflops\": " << json_number(r.tflops)
        << ", \"gbps\": " << json_number(r.gbps)
        << ", \"extra_bytes\": " << json_optional(r.extra_bytes)
        << ", \"naive_ms\": " << json_optional(r.naive_ms)
        << ", \"naive_score_bytes\": " << json_optional(r.naive_score_bytes)
        << ", \"max_abs_err\": " << json_optional(r.max_abs_err)
        << ", \"naive_note\": " << json_string(r.naive_note)
        << ", \"kvcache\": " << (s.kvcache ? "true" : "false")
        << ", \"page_size\": " << (s.kvcache ? std::to_string(s.kvcache->page_size) : "null")
        << ", \"append\": " << (s.kvcache && s.kvcache->append ? "true" : "false") << "}";
  }
  out << "\n  ]\n}\n";
  out.close();
  if (!out) {
    *error = "error while writing '" + path + "'";
    return false;
  }
  return true;
}

}  // namespace flashattn::bench
