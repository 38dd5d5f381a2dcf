#!/usr/bin/env bash
# On a GPU newer than sm80 (the H200): runs the FA2 code that only sm80 GPUs run, which the default
# build compiles but never executes there: the A100 tile choices (made by an A100's shared memory
# per block) and the kernels' sm80 branches (the backward's scalar dQ atomics, ...). Builds
# build-sm80/ with FLASHATTN_SM80_PTX=ON (the FA2 kernels as compute_80 PTX alone, compiled by the
# driver for this GPU with __CUDA_ARCH__ 800), checks that the FA2 objects hold sm_80 PTX and no
# GPU code, and runs the FA2 GPU suites (the FA2 fuzz tests included) in one process, so that each
# kernel module is JIT-compiled once (cached in build-sm80/jit-cache for later runs).
# Writes LOGDIR/build.log, objects.txt, fa2-suite.log, summary.txt.
# Exit status: 0 when the build, the object check and every test passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/sm80_paths.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
summary="$logdir/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary" >&2; }

build="$FA_ROOT/build-sm80"
fa_ensure_deps 1 >"$logdir/build.log" 2>&1
fa_setup_path
# FA3 and the test kernels keep real sm_90a code (FA_GPU_GENCODE replaces it for another GPU).
if ! fa_configure "$build" -DFLASHATTN_CUDA=ON -DFLASHATTN_SM80_PTX=ON -DFLASHATTN_BUILD_BENCH=OFF \
    "-DFLASHATTN_CUDA_GENCODE=${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}" >>"$logdir/build.log" 2>&1 ||
    ! fa_build "$build" flashattn_gpu_tests >>"$logdir/build.log" 2>&1; then
  note "build: FAILED (see build.log)"
  exit 1
fi
note "build: ok"

# Every FA2 object: PTX for sm_80, no SASS (else the GPU would run that instead of the sm80 code).
status=0
: >"$logdir/objects.txt"
for object in "$build"/CMakeFiles/flashattn.dir/src/fa2/*.o; do
  elf="$(cuobjdump --list-elf "$object" 2>/dev/null || true)"
  ptx="$(cuobjdump --list-ptx "$object" 2>/dev/null || true)"
  echo "$(basename "$object"): ${ptx//$'\n'/ } ${elf:+| ELF: ${elf//$'\n'/ }}" >>"$logdir/objects.txt"
  if [[ -n "$elf" || "$ptx" != *sm_80* ]]; then
    note "object check: $(basename "$object") is not sm_80 PTX alone (objects.txt)"
    status=1
  fi
done
[[ "$status" == 0 ]] && note "object check: ok ($(wc -l <"$logdir/objects.txt") FA2 objects, sm_80 PTX only)"

export CUDA_CACHE_PATH="$build/jit-cache" CUDA_CACHE_MAXSIZE=4294967296
binary="$build/tests/cpp/flashattn_gpu_tests"
# One process per run: JIT compilation of a module happens once (first runs take minutes).
run_suite() {
  local name="$1" filter="$2" log="$logdir/$1.log" verdict=ok
  timeout "${FA_SM80_TIMEOUT:-5400}" "$binary" --gtest_filter="$filter" >"$log" 2>&1 || verdict="FAILED (exit $?)"
  note "$name: $verdict; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | head -n 20 | sed 's/^/    /' | tee -a "$summary" >&2 || true
  [[ "$verdict" == ok ]]
}
run_suite fa2-suite '*Fa2*' || status=1
exit "$status"
