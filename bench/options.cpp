#include "options.h"

#include "fa3/bwd_variant_names.h"

#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>

namespace flashattn::bench {

const char* backend_choice_name(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::Auto: return "auto";
    case BackendChoice::Cpu: return "cpu";
    case BackendChoice::Fa2: return "fa2";
    case BackendChoice::Fa3: return "fa3";
  }
  return "?";
}

std::string usage_text(const char* program) {
  return std::string("usage: ") + program + R"( [options]

Times flashattn's forward and backward passes (and fwd_kvcache, the decode step) over a grid of
shapes and prints a table (median ms, TFLOP/s, GB/s, extra memory). On the CPU backend it also
runs the naive O(seqlen^2)-memory reference beside each forward and shows its time, its
score-matrix memory and the max |difference| of the outputs.

  --backend cpu|auto|fa2|fa3   which backend (default auto: the GPU when one is visible, else cpu)
  --grid small|peers|decode    small: CPU-sized (seqlen 256..2048, d 64/128); peers: the
                               published grid, (batch, heads) = (16384/seqlen, 2048/d), seqlen
                               512..16384, d 64/128/256; decode: serving's decode step through
                               fwd_kvcache (default small). Decode grid, d 128, causal, every shape
                               over a dense cache and over paged caches of 16 and 256 keys a page
                               (pages shuffled), K+V at most 4 GiB in bf16 (batch*keys*kv_heads
                               <= 8M); GB/s counts the K+V read:
                                 sweep: 32/8 heads, 1 query, batch 1/8/32/128 x 1k..128k keys
                                 variants at batch 1/8/32 x 8k/32k/128k keys: 64/8 heads; 32/32
                                 heads; append; 4 queries; 4 queries with append
                               on the CPU: sweep batch 1/4 x 1k/4k/16k keys, variants at batch
                               1/4 x 4k/16k keys, K+V at most 64 MiB in bf16
  --shape b,sq,sk,h,d[,hk]     one shape instead of a grid (hk: KV heads, default h)
  --kvcache dense|PAGE         with --shape: time fwd_kvcache over a cache of sk keys a sequence,
                               dense or in pages of PAGE keys
  --append                     with --kvcache: the call appends sq of the sk keys (k_new, v_new)
  --causal 0|1|both            causal settings to run (default: the grid's)
  --direction fwd|bwd|both     directions to run (default: the grid's)
  --dtype bf16|fp16|fp32|e4m3  element type of q, k, v, out (default bf16); e4m3: float8 q, k, v
                               and bf16 out, forward only (with --backend fa3: the fp8 kernels
                               with fp8_fwd_plan's choice, also while the public API refuses them)
  --warmup N                   untimed calls per case (default 1 on CPU, 3 on GPU)
  --repeats N                  timed calls per case; the median is reported (default 3 / 10)
  --num-splits N               split-KV count of the decode calls (one query, and every
                               fwd_kvcache call; default 0: the library chooses)
  --threads N                  CPU threads (default 0 = all hardware threads)
  --naive-max-bytes N[k|m|g]   run the naive reference only where seqlen_q*seqlen_k*8 bytes fit
                               (default 1g)
  --no-naive                   skip the naive reference
  --deterministic              backward in its deterministic mode (bitwise reproducible dQ)
  --device N                   CUDA device (default 0)
  --fa2-fwd-plan K=V[,K=V...]  with --backend fa2: run the FA2 forward with the kernel plan the
                               library picks per call (src/fa2/fwd_plan.h) changed in these fields:
                               base=1 (start from the base tiles: what sm80 runs, no decode or
                               wide d256 tiles), block_m, block_n, warps, stage_pages=0|1,
                               pack_gqa_queries=0|1 (the query heads of a KV
                               head packed into the rows of its tiles, for any seqlen_q; on the
                               chosen tiles), split_in_cluster=0|1 (sm90 decode tiles: the
                               splits of a row block merge in one cluster's shared memory:
                               a forced count of 2-16, or the rule's above 16, capped),
                               cluster_one_per_sm=0|1 (those CTAs one per
                               SM where the grid fits the SMs); e.g.
                               base=1, or block_m=64,block_n=64 (calls the plan cannot run are
                               skipped, with the library's reason)
  --fa2-bwd-plan K=V[,K=V...]  with --backend fa2: the FA2 backward's plan (src/fa2/bwd_plan.h):
                               block_m, key_tiles=1|2, stages=1|2, dq_bulk=0|1; e.g. key_tiles=1
  --fa3-fwd-plan K=V[,K=V...]  with --backend fa3: the FA3 forward's plan (src/fa3/fwd_plan.h):
                               block_n, consumers=2|3, pingpong=0|1, tma_store=0|1 (O by TMA
                               stores), section_mb=N (the dynamic schedule's sections; 0 = one head
                               each); e.g. pingpong=0,block_n=144. With --dtype e4m3: the fp8
                               forward's plan (src/fa3/fp8_fwd_plan.h) in block_n, consumers,
                               pingpong (the tile's kernel that takes any mask), tma_store,
                               section_mb (plans no built tile runs are skipped)
  --fa3-bwd-plan K=V[,K=V...]  with --backend fa3: the FA3 backward's plan (src/fa3/bwd_plan.h):
                               section_mb=N (the CTA order's sections of (sequence, kv head)
                               groups; 0 = one group after another), section_wave=0|1 (without
                               section_mb: sections of a wave of CTAs; set by causal calls),
                               tma_store=0|1 (dK and dV by TMA stores), row_stagger=N (a power of
                               two up to 64: key block n walks its row blocks from (n mod N) / N of the
                               way along; 1 = from the first); e.g. section_mb=0
  --fa3-bwd-variant NAME       with --backend fa3: the FA3 backward's kernel variant
                               (src/fa3/bwd_variant_names.h: default, dq-alternate, dq-overlap,
                               rows-on-m, with @128 for 128-row steps, e.g. default@128;
                               calls where it is not built are skipped)
  --json FILE                  also write every row as JSON
  -h, --help                   this text
)";
}

namespace {

std::optional<int> parse_int(const std::string& text, int min_value) {
  try {
    size_t used = 0;
    const long value = std::stol(text, &used);
    if (used != text.size() || value < min_value || value > 1000000000) return std::nullopt;
    return int(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "1073741824", "512m", "1g", "64k" (binary multiples).
std::optional<std::size_t> parse_bytes(std::string text) {
  if (text.empty()) return std::nullopt;
  std::size_t multiplier = 1;
  const char suffix = char(std::tolower(static_cast<unsigned char>(text.back())));
  if (suffix == 'k' || suffix == 'm' || suffix == 'g') {
    multiplier = suffix == 'k' ? (1u << 10) : suffix == 'm' ? (1u << 20) : (1u << 30);
    text.pop_back();
  }
  try {
    size_t used = 0;
    const unsigned long long value = std::stoull(text, &used);
    if (used != text.size()) return std::nullopt;
    return std::size_t(value) * multiplier;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// --kvcache and --append make sense only on a --shape that fwd_kvcache can run; the decode grid
// runs fwd_kvcache, which has no backward.
bool check_kvcache_options(const Options& o, const KvCache& kvcache, bool kvcache_given, std::string* error) {
  const bool backward_only = o.filter.direction == Direction::Bwd;
  if (kvcache.append && !kvcache_given) {
    *error = "--append needs --kvcache";
    return false;
  }
  if (kvcache_given && !o.shape) {
    *error = "--kvcache needs --shape (the decode grid sets its own caches)";
    return false;
  }
  if (kvcache_given && backward_only) {
    *error = "--kvcache times fwd_kvcache, which has no backward (--direction bwd)";
    return false;
  }
  if (kvcache.append && o.shape->seqlen_q > o.shape->seqlen_k) {
    *error = "--append appends sq of the sk keys: sq must not exceed sk";
    return false;
  }
  if (!o.shape && o.grid == "decode" && backward_only) {
    *error = "the decode grid times fwd_kvcache, which has no backward (--direction bwd)";
    return false;
  }
  return true;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv, std::string* error) {
  Options o;
  // --kvcache and --append shape a --shape given anywhere on the line; applied after the loop.
  KvCache kvcache;
  bool kvcache_given = false;
  auto set_plan_flags = [&](PlanFamily family, const std::string& v, PlanFlags* flags) {
    std::string why;
    const std::optional<PlanFlags> parsed = parse_plan_flags(family, v, &why);
    if (!parsed) *error = "invalid plan '" + v + "': " + why;
    if (parsed) *flags = *parsed;
    return parsed.has_value();
  };
  auto bad = [&](const std::string& option, const std::string& value) {
    *error = "invalid value '" + value + "' for " + option;
    return std::nullopt;
  };
  // Options that take a value; each returns false when the value is invalid.
  const std::map<std::string, std::function<bool(const std::string&)>> with_value{
      {"--backend",
       [&](const std::string& v) {
         static const std::map<std::string, BackendChoice> names{{"auto", BackendChoice::Auto},
                                                                 {"cpu", BackendChoice::Cpu},
                                                                 {"fa2", BackendChoice::Fa2},
                                                                 {"fa3", BackendChoice::Fa3}};
         const auto it = names.find(v);
         if (it == names.end()) return false;
         o.backend = it->second;
         return true;
       }},
      {"--grid",
       [&](const std::string& v) {
         for (const std::string& name : grid_names())
           if (v == name) {
             o.grid = v;
             return true;
           }
         return false;
       }},
      {"--shape",
       [&](const std::string& v) {
         std::string why;
         o.shape = parse_shape(v, &why);
         if (!o.shape) *error = why;
         return o.shape.has_value();
       }},
      {"--causal",
       [&](const std::string& v) {
         if (v == "both") o.filter.causal.reset();
         else if (v == "0") o.filter.causal = false;
         else if (v == "1") o.filter.causal = true;
         else return false;
         return true;
       }},
      {"--direction",
       [&](const std::string& v) {
         if (v == "both") o.filter.direction.reset();
         else if (v == "fwd") o.filter.direction = Direction::Fwd;
         else if (v == "bwd") o.filter.direction = Direction::Bwd;
         else return false;
         return true;
       }},
      {"--dtype",
       [&](const std::string& v) {
         if (v == "bf16") o.dtype = DType::BF16;
         else if (v == "fp16") o.dtype = DType::F16;
         else if (v == "fp32") o.dtype = DType::F32;
         else if (v == "e4m3") o.dtype = DType::F8E4M3;
         else return false;
         return true;
       }},
      {"--warmup", [&](const std::string& v) { return bool(o.warmup = parse_int(v, 0)); }},
      {"--repeats", [&](const std::string& v) { return bool(o.repeats = parse_int(v, 1)); }},
      {"--num-splits", [&](const std::string& v) { return bool(o.num_splits = parse_int(v, 0)); }},
      {"--threads",
       [&](const std::string& v) {
         const auto n = parse_int(v, 0);
         if (n) o.threads = *n;
         return n.has_value();
       }},
      {"--device",
       [&](const std::string& v) {
         const auto n = parse_int(v, 0);
         if (n) o.device = *n;
         return n.has_value();
       }},
      {"--naive-max-bytes",
       [&](const std::string& v) {
         const auto n = parse_bytes(v);
         if (n) o.naive_max_bytes = *n;
         return n.has_value();
       }},
      {"--kvcache",
       [&](const std::string& v) {
         const auto page_size = v == "dense" ? std::optional<int>(0) : parse_int(v, 1);
         if (page_size) kvcache.page_size = *page_size;
         return page_size.has_value();
       }},
      {"--fa2-fwd-plan", [&](const std::string& v) { return set_plan_flags(PlanFamily::Fa2Fwd, v, &o.fa2_fwd_plan); }},
      {"--fa2-bwd-plan", [&](const std::string& v) { return set_plan_flags(PlanFamily::Fa2Bwd, v, &o.fa2_bwd_plan); }},
      {"--fa3-fwd-plan", [&](const std::string& v) { return set_plan_flags(PlanFamily::Fa3Fwd, v, &o.fa3_fwd_plan); }},
      {"--fa3-bwd-plan", [&](const std::string& v) { return set_plan_flags(PlanFamily::Fa3Bwd, v, &o.fa3_bwd_plan); }},
      {"--fa3-bwd-variant",
       [&](const std::string& v) {
         std::string why;
         if (!fa3::parse_bwd_kernel(v, &why)) *error = why;
         o.fa3_bwd_variant = v;
         return error->empty();
       }},
      {"--json",
       [&](const std::string& v) {
         o.json_path = v;
         return !v.empty();
       }},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--deterministic") {
      o.deterministic = true;
      continue;
    }
    if (arg == "--no-naive") {
      o.naive = false;
      continue;
    }
    if (arg == "--append") {
      kvcache.append = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const auto it = with_value.find(arg);
    if (it == with_value.end()) {
      *error = "unknown option '" + arg + "' (see --help)";
      return std::nullopt;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return std::nullopt;
      }
      value = argv[++i];
    }
    error->clear();
    if (!it->second(value)) {
      if (!error->empty()) return std::nullopt;  // the handler explained it
      return bad(arg, value);
    }
    if (arg == "--kvcache") kvcache_given = true;
  }
  if (!check_kvcache_options(o, kvcache, kvcache_given, error)) return std::nullopt;
  if ((!o.fa2_fwd_plan.empty() || !o.fa2_bwd_plan.empty()) && o.backend != BackendChoice::Fa2) {
    *error = "--fa2-fwd-plan and --fa2-bwd-plan need --backend fa2";
    return std::nullopt;
  }
  if ((!o.fa3_fwd_plan.empty() || !o.fa3_bwd_plan.empty() || !o.fa3_bwd_variant.empty()) && o.backend != BackendChoice::Fa3) {
    *error = "--fa3-fwd-plan, --fa3-bwd-plan and --fa3-bwd-variant need --backend fa3";
    return std::nullopt;
  }
  if (o.dtype == DType::F8E4M3 && o.filter.direction != Direction::Fwd) {
    *error = "--dtype e4m3 has no backward: add --direction fwd";
    return std::nullopt;
  }
  if (kvcache_given) o.shape->kvcache = kvcache;
  return o;
}

}  // namespace flashattn::bench
