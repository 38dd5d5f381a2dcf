#!/usr/bin/env bash
# On a GPU newer than sm80 (the H200): runs the FA2 code that only sm80 GPUs run, which the default
# build compiles but never executes there: the A100 tile choices (made by an A100's shared memory
# per block) and the kernels' sm80 branches (the backward's scalar dQ atomics, ...). Builds
# build-sm80/ with FLASHATTN_FA2_AS_SM80=ON (the FA2 kernels compiled from compute_80, with
# __CUDA_ARCH__ 800, into sm_90 code: FA_SM80_CODE for another GPU), checks that every FA2 object
# holds that code alone, made from virtual sm_80, and runs the FA2 GPU suites (the FA2 fuzz tests
# included). The build needs no GPU: `FA_SM80_BUILD_ONLY=1` stops after the check, and
# `FA_SM80_BINARY=PATH` runs such a build's flashattn_gpu_tests carried to the GPU machine.
# FA_SM80_FILTER replaces the suites' gtest filter (*Fa2*).
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
code="${FA_SM80_CODE:-sm_90}"
fa_setup_path
status=0
binary="${FA_SM80_BINARY:-$build/tests/cpp/flashattn_gpu_tests}"
if [[ -z "${FA_SM80_BINARY:-}" ]]; then
  fa_ensure_deps 1 >"$logdir/build.log" 2>&1
  # FA3 and the test kernels keep real sm_90a code (FA_GPU_GENCODE replaces it for another GPU).
  if ! fa_configure "$build" -DFLASHATTN_CUDA=ON -DFLASHATTN_FA2_AS_SM80=ON "-DFLASHATTN_FA2_AS_SM80_CODE=$code" \
      -DFLASHATTN_BUILD_BENCH=OFF "-DFLASHATTN_CUDA_GENCODE=${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}" \
      >>"$logdir/build.log" 2>&1 || ! fa_build "$build" flashattn_gpu_tests >>"$logdir/build.log" 2>&1; then
    note "build: FAILED (see build.log)"
    exit 1
  fi
  note "build: ok"

  # Every FA2 object: one cubin for $code built from virtual sm_80, no PTX (which a driver could
  # compile at a newer arch instead).
  cuobjdump="$(command -v cuobjdump || echo /opt/cudatools/cuobjdump)"
  : >"$logdir/objects.txt"
  for object in "$build"/CMakeFiles/flashattn.dir/src/fa2/*.o "$build"/CMakeFiles/flashattn.dir/src/cuda/*.o; do
    elf="$("$cuobjdump" --list-elf "$object" 2>/dev/null | sed 's/.*: //' | tr '\n' ' ')"
    virtual="$("$cuobjdump" -elf "$object" 2>/dev/null | grep -o 'CUDA Virtual SM: [a-z_0-9]*' | sort -u | tr '\n' ' ')"
    ptx="$("$cuobjdump" --list-ptx "$object" 2>/dev/null | sed 's/.*: //' | tr '\n' ' ')"
    echo "$(basename "$object"): ${elf}| ${virtual}| PTX: ${ptx:-none}" >>"$logdir/objects.txt"
    if [[ "$elf" != *".$code.cubin"* || "$virtual" != "CUDA Virtual SM: sm_80 " || -n "$ptx" ]]; then
      note "object check: $(basename "$object") is not $code code from virtual sm_80 alone (objects.txt)"
      status=1
    fi
  done
  [[ "$status" == 0 ]] && note "object check: ok ($(wc -l <"$logdir/objects.txt") FA2 objects, $code from virtual sm_80 only)"
  [[ -n "${FA_SM80_BUILD_ONLY:-}" ]] && exit "$status"
fi
[[ -x "$binary" ]] || { note "no test binary at $binary"; exit 1; }

run_suite() {
  local name="$1" filter="$2" log="$logdir/$1.log" verdict=ok
  timeout "${FA_SM80_TIMEOUT:-1800}" "$binary" --gtest_filter="$filter" >"$log" 2>&1 || verdict="FAILED (exit $?)"
  note "$name: $verdict; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | head -n 20 | sed 's/^/    /' | tee -a "$summary" >&2 || true
  [[ "$verdict" == ok ]]
}
run_suite fa2-suite "${FA_SM80_FILTER:-*Fa2*}" || status=1
exit "$status"
