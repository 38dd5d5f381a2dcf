#!/usr/bin/env bash
# On the GPU machine: everything issue 16 (inference at memory bandwidth) needs in one call.
#   build.log, ptxas.txt   flashattn_gpu_tests and flashattn_bench (sm_90a only unless
#                          FA_GPU_GENCODE says otherwise) and ptxas's register/spill report
#   tests.log              the decode, KV-cache, left-padding, varlen-over-cache, paged-varlen and
#                          combine GPU tests (the forced combine plans too), and the decode race check
#   sanitize/              compute-sanitizer memcheck on small decode and KV-cache cases
#   bench/                 tools/gpu/bench_decode.sh: ours beside SDPA and FlashAttention-3 (with
#                          .anchors/ carried), GB/s of K+V read, table.md
# Steps can be skipped: DECODE_STEPS="build test sanitize bench" (default: all).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/decode.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
steps=" ${DECODE_STEPS:-build test sanitize bench} "
export FA_GPU_GENCODE="${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}"
fa_setup_path
filter="Decode/Fa2Forward.*:*Fa2ForwardRace.*:*Fa2KvCache*:*Fa2PagedVarlen*:*Fa2Combine.*:*Fa2CombinePlan.*"
if [[ "$steps" == *" build "* ]]; then
  fa_build_tests_and_bench "$logdir"
fi
if [[ "$steps" == *" test "* ]]; then
  timeout "${DECODE_TEST_TIMEOUT:-420}" "$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests" \
    --gtest_filter="${DECODE_TEST_FILTER:-$filter}" >"$logdir/tests.log" 2>&1
  echo "tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' "$logdir/tests.log" | tr '\n' ' '))"
  grep -E '^\[  FAILED  \]' "$logdir/tests.log" | head -n 20
fi
if [[ "$steps" == *" sanitize "* ]]; then
  # Small cases of each new path: packed decode with splits, idle warps, leftpad, varlen queries
  # over a cache, paged varlen with page size 1 and 7.
  small="Decode/Fa2Forward.MatchesReference/*_b3_sq1_sk77_h32x8_d128_*:*Fa2KvCacheAlone.*/0_*:"
  small+="*Fa2KvCacheAlone.*/16_*:*Fa2KvCacheAlone.*varlen_leftpad*:*Fa2PagedVarlen.*/0_*:*Fa2PagedVarlen.*/1_*"
  FA_SANITIZE_FILTER="${DECODE_SANITIZE_FILTER:-$small}" FA_SANITIZE_TOOLS="${DECODE_SANITIZE_TOOLS:-memcheck}" \
    bash "$FA_ROOT/tools/gpu/sanitize.sh" "$logdir/sanitize" || true
  cat "$logdir/sanitize/summary.txt" 2>/dev/null
fi
if [[ "$steps" == *" bench "* ]]; then
  bash "$FA_ROOT/tools/gpu/bench_decode.sh" "$logdir/bench"
fi
