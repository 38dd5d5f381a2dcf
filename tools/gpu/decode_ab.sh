#!/usr/bin/env bash
# On the GPU machine: tools/gpu/bench_ab.sh on decode shapes (fwd_kvcache, one call per shape),
# GB/s of K+V read per binary and round.
# usage: tools/gpu/decode_ab.sh LOGDIR NAME=BINARY NAME=BINARY [...]
#   DECODE_AB_SHAPES  "b,sq,sk,h,d,hk:dense|PAGE ..." (default: batch 1, 8, 32, 128 at 8k keys,
#                     1 x 32k and 8 x 32k, GQA 32/8, d128, dense)
#   DECODE_AB_ROUNDS  rounds (default 2); DECODE_AB_ARGS: more benchmark arguments for every run
set -euo pipefail
shapes=(${DECODE_AB_SHAPES:-1,1,8192,32,128,8:dense 8,1,8192,32,128,8:dense 32,1,8192,32,128,8:dense
  128,1,8192,32,128,8:dense 1,1,32768,32,128,8:dense 8,1,32768,32,128,8:dense})
cases=""
for shape in "${shapes[@]}"; do
  cases+="--backend auto --shape ${shape%:*} --kvcache ${shape#*:} ${DECODE_AB_ARGS:-};"
done
BENCH_AB_CASES="$cases" BENCH_AB_METRIC=gbps BENCH_AB_ROUNDS="${DECODE_AB_ROUNDS:-2}" \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/bench_ab.sh" "$@"
