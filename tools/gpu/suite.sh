#!/usr/bin/env bash
# On the GPU machine: the GPU test binary in parallel shards (GoogleTest sharding), so that the
# tests' CPU reference, not the GPU, stops being the bottleneck. One GPU serves every shard.
#   tools/gpu/suite.sh LOGDIR [FILTER] [SHARDS]
# FILTER: a gtest filter (default: every test); SHARDS: processes (default: cores / 2, at most 8).
# Writes LOGDIR/shard-K.log and LOGDIR/summary.txt (passed / failed counts, the failed tests).
# Exit status 0 when every shard passed. SUITE_TIMEOUT (s, default 480) bounds each shard;
# SUITE_BIN names another test binary (default build-gpu's flashattn_gpu_tests).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/suite.sh LOGDIR [FILTER] [SHARDS]}"
filter="${2:-*}"
cores="$(nproc 2>/dev/null || echo 2)"
shards="${3:-$((cores / 2 > 8 ? 8 : (cores / 2 > 0 ? cores / 2 : 1)))}"
bin="${SUITE_BIN:-$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests}"
[[ -x "$bin" ]] || fa_die "no test binary at $bin (build flashattn_gpu_tests first)"
mkdir -p "$logdir"
start=$SECONDS
pids=()
for ((k = 0; k < shards; ++k)); do
  GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$k" timeout "${SUITE_TIMEOUT:-480}" "$bin" --gtest_filter="$filter" \
    >"$logdir/shard-$k.log" 2>&1 &
  pids+=($!)
done
status=0
for k in "${!pids[@]}"; do
  wait "${pids[$k]}" || { echo "shard $k: exit $?" >>"$logdir/summary.txt"; status=1; }
done
passed=$(cat "$logdir"/shard-*.log | grep -c '^\[       OK \]')
# a failed test's own line ends in its time; gtest's closing list repeats the names without it
failed=$(cat "$logdir"/shard-*.log | grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$')
{
  echo "suite '$filter': $passed passed, $failed failed, $shards shards, $((SECONDS - start)) s"
  cat "$logdir"/shard-*.log | grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' | head -n 40
  # a shard killed by its timeout names the test it was in
  for f in "$logdir"/shard-*.log; do
    last=$(grep -E '^\[ RUN      \]' "$f" | tail -n 1)
    grep -qE '^\[==========\] .* ran\.' "$f" || echo "unfinished: $(basename "$f") at ${last#*] }"
  done
} | tee -a "$logdir/summary.txt"
((failed == 0)) || status=1
exit $status
