#!/usr/bin/env bash
# On a GPU machine: builds flashattn_bench with CUDA (sm_80 + sm_90a) and runs it, writing
# LOGDIR/bench.txt (the table, with nvidia-smi's view of the device first) and LOGDIR/bench.json.
# Arguments after LOGDIR replace the default benchmark arguments (--backend auto --grid peers).
# FA_PREBUILT=1 runs a build-gpu/bench/flashattn_bench that came along built (no configure, no build).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/bench.sh LOGDIR [flashattn_bench arguments]}"
shift
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
bench_args=("$@")
if ((${#bench_args[@]} == 0)); then
  # The peers grid is sized for a GPU: on a CPU it would run for hours.
  fa_gpu_present || fa_die "no GPU visible (nvidia-smi); pass benchmark arguments to run anyway"
  bench_args=(--backend auto --grid peers)
fi

fa_setup_path
# FA_PREBUILT=1: build-gpu/bench/flashattn_bench came along built (carried); no configure or build.
if [[ "${FA_PREBUILT:-0}" != 1 ]]; then
  # The tests are configured too when GoogleTest is at hand, so a test run in the same build-gpu/
  # does not reconfigure; the benchmark itself does not need them.
  want_tests=OFF
  fa_gtest_available && want_tests=ON
  fa_ensure_deps 0
  build_log="$logdir/bench-build.log"
  : >"$build_log"
  fa_gpu_configure "$build_log" "$want_tests" >/dev/null || fa_die "configure failed (see $build_log)"
  fa_build "$FA_GPU_BUILD" flashattn_bench >>"$build_log" 2>&1 || {
    tail -n 40 "$build_log" >&2
    fa_die "build failed (see $build_log)"
  }
  rm -f "$build_log"  # keep LOGDIR to the results; the build log matters only when it fails
fi

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv || echo "nvidia-smi failed"
  echo
} 2>&1 | tee "$logdir/bench.txt"
set -o pipefail
"$FA_GPU_BUILD/bench/flashattn_bench" "${bench_args[@]}" --json "$logdir/bench.json" 2>&1 |
  tee -a "$logdir/bench.txt"
