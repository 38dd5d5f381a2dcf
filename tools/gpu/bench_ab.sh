#!/usr/bin/env bash
# On the GPU machine: two or more flashattn_bench binaries (e.g. main's and a branch's, built here
# and carried) timed on the same cases, every case on each binary back to back in alternating
# order, so that clock and thermal drift falls on every binary alike. Prints and writes
# LOGDIR/ab.md: the metric per case and binary, one value per round, and each binary's best round
# over the first binary's.
# usage: tools/gpu/bench_ab.sh LOGDIR NAME=BINARY NAME=BINARY [...]
#   BENCH_AB_CASES   cases separated by ';', each one benchmark call's arguments (required), e.g.
#                    "--backend fa3 --shape 8,2048,2048,16,128 --causal 1 --direction bwd --no-naive"
#   BENCH_AB_METRIC  tflops or gbps (default gbps); BENCH_AB_ROUNDS rounds (default 2)
# tools/gpu/decode_ab.sh is this on decode shapes.
set -euo pipefail
logdir="${1:?usage: tools/gpu/bench_ab.sh LOGDIR NAME=BINARY NAME=BINARY [...]}"
shift
(($# >= 2)) || { echo "bench_ab.sh: name at least two binaries" >&2; exit 1; }
[[ -n "${BENCH_AB_CASES:-}" ]] || { echo "bench_ab.sh: set BENCH_AB_CASES" >&2; exit 1; }
case "${BENCH_AB_METRIC:-gbps}" in
  tflops) from_end=4 ;;
  gbps) from_end=3 ;;
  *) echo "bench_ab.sh: BENCH_AB_METRIC is tflops or gbps" >&2; exit 1 ;;
esac
mkdir -p "$logdir"
IFS=';' read -r -a cases <<<"$BENCH_AB_CASES"
rounds="${BENCH_AB_ROUNDS:-2}"
raw="$logdir/ab.tsv"
: >"$raw"
for entry in "$@"; do
  [[ -x "${entry#*=}" ]] || { echo "bench_ab.sh: ${entry#*=} is not an executable" >&2; exit 1; }
done
# Each case runs on every binary back to back, in turn forwards and backwards from round to
# round: the binaries meet a case at the same clocks (long full-power runs lower them by up to
# 8 % on an H100), and none is always first.
entries=("$@")
for ((round = 1; round <= rounds; ++round)); do
  for c in "${cases[@]}"; do
    read -r -a args <<<"$c"  # a case's benchmark arguments
    ((${#args[@]} > 0)) || continue
    for ((e = 0; e < ${#entries[@]}; ++e)); do
      entry="${entries[round % 2 == 1 ? e : ${#entries[@]} - 1 - e]}"
      name="${entry%%=*}" bin="${entry#*=}"
      value=$("$bin" --repeats 20 "${args[@]}" 2>&1 |
        awk -v k="$from_end" '/^(auto|fa2|fa3|cpu)[ (]/ {v = $(NF - k)} END {print v == "" ? "failed" : v}')
      printf '%s\t%s\t%s\t%s\n' "$name" "${args[*]}" "$round" "$value" >>"$raw"
    done
  done
done
python3 - "$raw" "$@" <<'PY' | tee "$logdir/ab.md"
import sys
from collections import defaultdict
raw, names = sys.argv[1], [e.split("=", 1)[0] for e in sys.argv[2:]]
runs = defaultdict(list)
cases = []
for line in open(raw):
    name, case, _, value = line.rstrip("\n").split("\t")
    runs[(name, case)].append(value)
    if case not in cases:
        cases.append(case)
def best(name, case):
    vals = [float(v) for v in runs[(name, case)] if v != "failed"]
    return max(vals) if vals else None
print("| case | " + " | ".join(names) + " | " + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
print("|---" * (2 * len(names)) + "|")
for case in cases:
    cells = [" ".join(runs[(n, case)]) for n in names]
    base = best(names[0], case)
    ratios = []
    for n in names[1:]:
        b = best(n, case)
        ratios.append(f"{b / base:.3f}" if b and base else "-")
    print(f"| {case} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
