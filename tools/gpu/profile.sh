#!/usr/bin/env bash
# On a GPU machine: builds flashattn_bench and profiles one kernel launch with Nsight Compute
# (clocks left as they are), writing LOGDIR/ncu.txt. Arguments after LOGDIR go to the benchmark
# (default: one bf16 d128 forward, 4 x 4096 x 16 heads, on fa2). FA_NCU_KERNEL: kernel-name regex
# (default fwd_kernel). FA_NCU_OUT: report file name (default ncu.txt).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/profile.sh LOGDIR [flashattn_bench arguments]}"
shift
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
bench_args=("$@")
((${#bench_args[@]} > 0)) || bench_args=(--backend fa2 --shape 4,4096,4096,16,128 --causal 0 --direction fwd --warmup 1 --repeats 1)

fa_setup_path
fa_ensure_deps 0
build_log="$logdir/profile-build.log"
fa_gpu_configure "$build_log" OFF >/dev/null || fa_die "configure failed (see $build_log)"
fa_build "$FA_GPU_BUILD" flashattn_bench >>"$build_log" 2>&1 || fa_die "build failed (see $build_log)"
ncu_bin="$(fa_ncu_binary)"
"$ncu_bin" --clock-control none --kernel-name "regex:${FA_NCU_KERNEL:-fwd_kernel}" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section SourceCounters \
  "$FA_GPU_BUILD/bench/flashattn_bench" "${bench_args[@]}" >"$logdir/${FA_NCU_OUT:-ncu.txt}" 2>&1 || true
tail -n 200 "$logdir/${FA_NCU_OUT:-ncu.txt}"
