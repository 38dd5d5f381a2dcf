#!/usr/bin/env bash
# On a GPU machine: builds with CUDA (sm_80 + sm_90a), runs the GPU tests (ctest -L gpu) and the CPU
# tests (ctest -L cpu), and writes everything into LOGDIR:
#   nvidia-smi.txt  build.log (configure + build)  ptxas.txt (-Xptxas -v resource report)
#   ctest-gpu.log  ctest-cpu.log  summary.txt
# Needs GoogleTest: the system package, or sources carried in .deps (tools/gpu/prepare_deps.sh).
# Exit status: 0 when everything built and every test passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

# The tests run the shipped kernels. FA_HANG_TRAP=ON builds mbarrier waits that trap after seconds
# instead (to localise a hang; it changes register allocation: the FA3 kernels then spill).
export FA_HANG_TRAP="${FA_HANG_TRAP:-OFF}"
logdir="${1:?usage: tools/gpu/test.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
summary="$logdir/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary" >&2; }

{ date -u; nvidia-smi || echo "nvidia-smi failed"; } >"$logdir/nvidia-smi.txt" 2>&1
fa_setup_path
note "nvcc: $(command -v nvcc || echo missing) $(nvcc --version 2>/dev/null | tail -n1)"

fa_ensure_deps 1 2>&1 | tee "$logdir/build.log"
fa_setup_path  # again: the line above ran in a pipeline's subshell, its PATH changes are gone
build_log="$logdir/build.log"
if ! fa_gpu_configure "$build_log" ON; then
  note "configure: FAILED (see build.log)"
  exit 1
fi
start=$SECONDS
if ! fa_build "$FA_GPU_BUILD" 2>&1 | tee -a "$build_log"; then
  fa_extract_ptxas_report "$build_log" "$logdir/ptxas.txt"
  note "build: FAILED after $((SECONDS - start)) s (see build.log)"
  exit 1
fi
note "build: ok in $((SECONDS - start)) s with $FA_JOBS jobs"
fa_extract_ptxas_report "$build_log" "$logdir/ptxas.txt"

status=0
cd "$FA_GPU_BUILD"
# GPU tests share one device: a few at a time keeps memory use and timing noise down.
# ctest counts a skipped test as passed: the summary says how many skipped (a GPU suite that
# skips everything on a GPU machine means the device was not usable).
run_suite() {
  local label="$1" jobs="$2" log="$logdir/ctest-$1.log" verdict=ok
  ctest -L "$label" --output-on-failure -j "$jobs" >"$log" 2>&1 || verdict=FAILED
  local skipped
  skipped="$(grep -c '\*\*\*Skipped' "$log" || true)"
  note "$label tests: $verdict ($(grep -E 'tests passed|tests failed' "$log" | tail -n1); $skipped skipped)"
  grep -E '\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run' "$log" | head -n 20 | sed "s/^/  $label: /" >>"$summary" || true
  [[ "$verdict" == ok ]]
}
run_suite gpu "${FA_GPU_TEST_JOBS:-2}" || status=1
# FA_SKIP_CPU_SUITE=1 leaves the CPU suite to CI (it needs no GPU) when device time is short.
if [[ "${FA_SKIP_CPU_SUITE:-0}" == 1 ]]; then
  note "cpu tests: skipped (FA_SKIP_CPU_SUITE=1)"
else
  run_suite cpu "$FA_JOBS" || status=1
fi
exit "$status"
