// Command-line options of flashattn_bench.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "flashattn/flashattn.h"
#include "grid.h"
#include "plan_flags.h"

namespace flashattn::bench {

enum class BackendChoice { Auto, Cpu, Fa2, Fa3 };

struct Options {
  BackendChoice backend = BackendChoice::Auto;
  std::string grid = "small";
  std::optional<Shape> shape;  // --shape: run this shape instead of a grid (with --kvcache and
                               //   --append: through fwd_kvcache)
  GridFilter filter;           // --causal, --direction
  DType dtype = DType::BF16;
  std::optional<int> warmup;   // defaults depend on the device (see main.cpp)
  std::optional<int> repeats;
  std::optional<int> num_splits;  // --num-splits: split-KV count of decode calls (default 0: choose)
  std::string json_path;
  int threads = 0;  // CPU threads, 0 = all
  std::size_t naive_max_bytes = std::size_t(1) << 30;
  bool naive = true;
  bool deterministic = false;  // --deterministic: the backward's deterministic mode
  int device = 0;  // CUDA device
  // --fa2-fwd-plan, --fa2-bwd-plan (--backend fa2), --fa3-fwd-plan, --fa3-bwd-plan (--backend
  // fa3): plan changes.
  PlanFlags fa2_fwd_plan, fa2_bwd_plan, fa3_fwd_plan, fa3_bwd_plan;
  // --fa3-bwd-variant (--backend fa3): the FA3 backward kernel variant (fa3/bwd_variant_names.h).
  std::string fa3_bwd_variant;
  bool help = false;
};

// Parses argv; on a bad option returns nullopt with *error set.
std::optional<Options> parse_options(int argc, char** argv, std::string* error);
std::string usage_text(const char* program);
const char* backend_choice_name(BackendChoice choice);

}  // namespace flashattn::bench
