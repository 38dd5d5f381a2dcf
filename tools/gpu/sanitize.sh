#!/usr/bin/env bash
# On a GPU machine, after tools/gpu/test.sh built build-gpu/: runs compute-sanitizer's memcheck,
# racecheck and synccheck over small GPU test cases (every kernel family: FA2 forward, backward in
# both dQ modes, kvcache, combine, FA3 forward). Writes LOGDIR/sanitize-TOOL.log and a line per tool
# to LOGDIR/summary.txt. Exit status: 0 when every tool reports no errors.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/sanitize.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
fa_setup_path
binary="$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests"
[[ -x "$binary" ]] || fa_die "$binary missing: run tools/gpu/test.sh first"
sanitizer="$(command -v compute-sanitizer || true)"
[[ -n "$sanitizer" ]] || sanitizer="$(dirname "$(command -v nvcc)")/compute-sanitizer"
[[ -x "$sanitizer" ]] || fa_die "compute-sanitizer not found"

# Sweep indices (see feature_sweep): ragged tails with causal at d64, d128 and d256, GQA causal,
# dropout, a window; plus the kvcache and combine cases with index 0..2.
small_cases=(9 25 28 34 39 46 53)
filter=""
for i in "${small_cases[@]}"; do
  filter+="*Fa2Forward.MatchesReference/${i}_*:*Fa2Backward.MatchesReference/${i}_*:"
  filter+="*Fa3Forward.MatchesReference/${i}_*:"
done
filter+="*Fa2BackwardDeterministic.MatchesReference/0_*:*Fa2BackwardDeterministic.MatchesReference/5_*:"
# The FA2 backward's forced plans: one key tile per warp (d64 and d128 cases).
filter+="*Fa2Backward.OneKeyTileMatchReference/9_*:*Fa2Backward.OneKeyTileMatchReference/25_*:"
filter+="*Fa2Backward.BulkDqMatchReference/9_*:*Fa2Backward.BulkDqMatchReference/25_*:*Fa2Backward.BulkDqMatchReference/28_*:"
# (softcap: one key tile, the dQ staging tile in the Q stage that the next step refills)
filter+="*Fa2Backward.BulkDqMatchReference/*_sk160_h4x2_d64_bfloat16_softcap:"
# d256: the default adds dQ by bulk reductions (34 in the sweep above); the atomics forced.
filter+="*Fa2Backward.AtomicDqMatchReference/34_*:"
# The FA2 forward's base tiles where sm90 takes others (d256: sm80's 64 x 32 tiles).
filter+="*Fa2Forward.BaseTilesMatchReference/34_*:"
filter+="*Fa2KvCache.MatchesReference/0_*:*Fa2KvCache.MatchesReference/2_*:*Fa2Combine.*:"
# FA3 with more work tiles than SMs (persistent CTAs, three consumer warpgroups at d64), and the
# dynamic schedule (causal d64; varlen d128 causal with empty sequences; a window wider than the
# sequence on one side).
# (the d64 persistent case with O by TMA stores forced: d64 takes register stores by default)
filter+="*Fa3ForwardPersistent.TmaStoresMatchReference/0_*:"
filter+="*Fa3ForwardPersistent.MatchesReference/0_*:*Fa3ForwardUnequalTiles.DynamicScheduleMatchesReference/0_*:"
filter+="*Fa3ForwardUnequalTiles.DynamicScheduleMatchesReference/12_*:*Fa3ForwardUnequalTiles.DynamicScheduleMatchesReference/7_*:"
# FA3 backward: ragged causal d64 and d128, causal seqused_k (K/V tails cleared), causal varlen
# d128, and the deterministic mode with GQA (semaphores, descending order).
filter+="$(fa3_bwd_sanitize_filter)"
# FA_SANITIZE_FILTER replaces the list (a subset when device time is short).
filter="${FA_SANITIZE_FILTER:-$filter}"
tools="${FA_SANITIZE_TOOLS:-memcheck racecheck synccheck}"

status=0
for tool in $tools; do
  log="$logdir/sanitize-$tool.log"
  verdict=ok
  timeout "${FA_SANITIZE_TIMEOUT:-240}" "$sanitizer" --tool "$tool" --error-exitcode 17 \
    "$binary" --gtest_filter="$filter" >"$log" 2>&1 || verdict="FAILED (exit $?)"
  [[ "$verdict" == ok ]] || status=1
  echo "sanitize $tool: $verdict; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n1);" \
    "$(grep -E '^\[  PASSED' "$log" || true)" | tee -a "$logdir/summary.txt"
  # The first reports and the test that was running, on stdout too: a remote run may not bring
  # the logs back.
  if [[ "$verdict" != ok ]]; then
    { grep -E '^\[ RUN|^========= (Error|    (Read|Write|at))' "$log" | grep -B1 -A2 'Error' | head -n 24; } || true
  fi
done
exit "$status"
