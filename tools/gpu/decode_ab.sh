#!/usr/bin/env bash
# On the GPU machine: two or more flashattn_bench binaries (e.g. main's and a branch's, built here
# and carried) timed on the same decode shapes in alternating rounds, so that clock and thermal
# drift falls on every binary alike. Prints and writes LOGDIR/ab.md: GB/s of K+V read per shape and
# binary, one column per round, and each binary's best round over the first one's.
# usage: tools/gpu/decode_ab.sh LOGDIR NAME=BINARY NAME=BINARY [...]
#   DECODE_AB_SHAPES  "b,sq,sk,h,d,hk:dense|PAGE ..." (default: batch 1, 8, 32, 128 at 8k keys,
#                     1 x 32k and 8 x 32k, GQA 32/8, d128, dense)
#   DECODE_AB_ROUNDS  rounds (default 2); DECODE_AB_ARGS: more benchmark arguments for every run
set -euo pipefail
logdir="${1:?usage: tools/gpu/decode_ab.sh LOGDIR NAME=BINARY NAME=BINARY [...]}"
shift
(($# >= 2)) || { echo "decode_ab.sh: name at least two binaries" >&2; exit 1; }
mkdir -p "$logdir"
shapes=(${DECODE_AB_SHAPES:-1,1,8192,32,128,8:dense 8,1,8192,32,128,8:dense 32,1,8192,32,128,8:dense
  128,1,8192,32,128,8:dense 1,1,32768,32,128,8:dense 8,1,32768,32,128,8:dense})
rounds="${DECODE_AB_ROUNDS:-2}"
raw="$logdir/ab.txt"
: >"$raw"
for ((round = 1; round <= rounds; ++round)); do
  for entry in "$@"; do
    name="${entry%%=*}" bin="${entry#*=}"
    [[ -x "$bin" ]] || { echo "decode_ab.sh: $bin is not an executable" >&2; exit 1; }
    for shape in "${shapes[@]}"; do
      # shellcheck disable=SC2086  # DECODE_AB_ARGS: benchmark arguments
      gbps=$("$bin" --backend auto --shape "${shape%:*}" --kvcache "${shape#*:}" --repeats 20 ${DECODE_AB_ARGS:-} 2>&1 |
        awk '/^auto/ {v = $(NF - 3)} END {print v == "" ? "failed" : v}')
      echo "$name $shape $round $gbps" >>"$raw"
    done
  done
done
python3 - "$raw" "$@" <<'PY' | tee "$logdir/ab.md"
import sys
from collections import defaultdict
raw, names = sys.argv[1], [e.split("=", 1)[0] for e in sys.argv[2:]]
runs = defaultdict(list)
shapes = []
for line in open(raw):
    name, shape, _, gbps = line.split()
    runs[(name, shape)].append(gbps)
    if shape not in shapes:
        shapes.append(shape)
def best(name, shape):
    vals = [float(v) for v in runs[(name, shape)] if v != "failed"]
    return max(vals) if vals else None
print("| shape | " + " | ".join(names) + " | " + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
print("|---" * (1 + 2 * len(names) - 1) + "|")
for shape in shapes:
    cells = [" ".join(runs[(n, shape)]) for n in names]
    base = best(names[0], shape)
    ratios = []
    for n in names[1:]:
        b = best(n, shape)
        ratios.append(f"{b / base:.3f}" if b and base else "-")
    print(f"| {shape} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
