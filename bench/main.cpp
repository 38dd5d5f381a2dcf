// flashattn_bench: times fwd/bwd (and fwd_kvcache) over a grid of shapes on one backend. See --help.
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "grid.h"
#include "options.h"
#include "report.h"
#include "runner.h"

namespace fb = flashattn::bench;

namespace {

struct Plan {
  fb::RunSettings settings;
  bool on_gpu = false;
  std::string device;
};

// Which device runs and what the library is asked for. Auto picks the GPU when one is visible;
// fa2/fa3 need one (without it there is nothing to allocate device tensors on, so the benchmark
// says so itself; with one, whatever the library answers is reported).
std::optional<Plan> make_plan(const fb::Options& o, std::string* error) {
  Plan plan;
  const bool cuda_runner_built = fb::cuda_runner_built();
  const flashattn::DeviceInfo info = flashattn::device_info(o.device);
  switch (o.backend) {
    case fb::BackendChoice::Auto:
      plan.on_gpu = cuda_runner_built && info.device_count > 0;
      plan.settings.backend = flashattn::Backend::Auto;
      plan.settings.label = plan.on_gpu ? "auto(cuda)" : "auto(cpu)";
      break;
    case fb::BackendChoice::Cpu:
      plan.settings.backend = flashattn::Backend::Cpu;
      plan.settings.label = "cpu";
      break;
    case fb::BackendChoice::Fa2:
    case fb::BackendChoice::Fa3:
      if (!cuda_runner_built || info.device_count == 0) {
        *error = std::string("--backend ") + fb::backend_choice_name(o.backend) +
                 " needs a CUDA device: " +
                 (cuda_runner_built ? "none is visible" : "flashattn was built without CUDA");
        return std::nullopt;
      }
      plan.on_gpu = true;
      plan.settings.backend =
          o.backend == fb::BackendChoice::Fa2 ? flashattn::Backend::Fa2 : flashattn::Backend::Fa3;
      plan.settings.label = fb::backend_choice_name(o.backend);
      break;
  }
  plan.settings.dtype = o.dtype;
  plan.settings.warmup = o.warmup.value_or(plan.on_gpu ? 3 : 1);
  plan.settings.repeats = o.repeats.value_or(plan.on_gpu ? 10 : 3);
  plan.settings.naive = o.naive && !plan.on_gpu;
  plan.settings.deterministic = o.deterministic;
  plan.settings.naive_max_bytes = o.naive_max_bytes;
  plan.settings.device = o.device;
  plan.settings.decode_splits = o.num_splits.value_or(0);
  plan.settings.fa2_fwd_plan = o.fa2_fwd_plan;
  plan.settings.fa2_bwd_plan = o.fa2_bwd_plan;
  plan.settings.fa3_fwd_plan = o.fa3_fwd_plan;
  plan.settings.fa3_bwd_plan = o.fa3_bwd_plan;
  plan.settings.fa3_bwd_variant = o.fa3_bwd_variant;
  if (plan.on_gpu) {
    plan.device = fb::cuda_device_description(o.device);
  } else {
    plan.device = "cpu (" + std::to_string(flashattn::cpu_threads()) + " threads)";
  }
  return plan;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

void write_json_or_warn(const fb::Options& o, const fb::RunInfo& info,
                        const std::vector<fb::Row>& rows) {
  if (o.json_path.empty()) return;
  std::string error;
  if (!fb::write_json(o.json_path, info, rows, &error))
    std::fprintf(stderr, "flashattn_bench: %s\n", error.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  const auto options = fb::parse_options(argc, argv, &error);
  if (!options) {
    std::fprintf(stderr, "flashattn_bench: %s\n", error.c_str());
    return 2;
  }
  const fb::Options& o = *options;
  if (o.help) {
    std::fputs(fb::usage_text(argv[0]).c_str(), stdout);
    return 0;
  }
  if (const flashattn::Status st = flashattn::set_cpu_threads(o.threads); !st.ok()) {
    std::fprintf(stderr, "flashattn_bench: --threads: %s\n", st.message().c_str());
    return 2;
  }

  const std::optional<Plan> planned = make_plan(o, &error);
  if (!planned) {
    std::fprintf(stderr, "flashattn_bench: %s\n", error.c_str());
    return 1;
  }
  const Plan& plan = *planned;
  std::vector<fb::Case> cases;
  if (o.shape) {
    cases = fb::single_shape_cases(*o.shape, o.filter);
  } else {
    // The name was checked while parsing.
    cases = *fb::named_grid(o.grid, o.filter, plan.on_gpu ? fb::Machine::Gpu : fb::Machine::Cpu);
  }
  fb::RunInfo info;
  info.library_version = flashattn::version();
  info.date_utc = utc_now();
  info.device = plan.device;
  info.grid = o.shape ? "shape" : o.grid;
  info.dtype = flashattn::dtype_name(o.dtype);
  info.warmup = plan.settings.warmup;
  info.repeats = plan.settings.repeats;
  info.threads = flashattn::cpu_threads();

  std::printf("# flashattn %s | %s | backend %s | device %s | dtype %s | grid %s | warmup %d, repeats %d\n",
              info.library_version.c_str(), info.date_utc.c_str(), plan.settings.label.c_str(),
              info.device.c_str(), info.dtype.c_str(), info.grid.c_str(), info.warmup, info.repeats);
  if (plan.settings.naive)
    std::printf("# naive = float64 reference with the full seqlen_q x seqlen_k score matrix "
                "(naive_scores: its size per (batch, head)); extra_mem = tiled workspace peak\n");

  std::unique_ptr<fb::Runner> runner =
      plan.on_gpu ? fb::make_cuda_runner(plan.settings) : fb::make_host_runner(plan.settings);
  const fb::TablePrinter table(stdout, plan.settings.naive);
  table.header();
  std::vector<fb::Row> rows;
  for (const fb::Case& c : cases) {
    fb::Row row;
    const flashattn::Status status = runner->run(c, &row);
    if (status.code() == flashattn::ErrorCode::Unsupported) {
      // A backend that does not cover a case (fa3 at d256 today) skips it; the table says so.
      std::printf("# skipped %s: %s\n", fb::describe_case(c).c_str(), status.message().c_str());
      continue;
    }
    if (!status.ok()) {
      std::fprintf(stderr, "flashattn_bench: failed: %s: %s\n", fb::describe_case(c).c_str(),
                   status.message().c_str());
      write_json_or_warn(o, info, rows);  // keep what was measured before the failure
      return 1;
    }
    table.row(row);
    rows.push_back(std::move(row));
  }
  write_json_or_warn(o, info, rows);
  return 0;
}
