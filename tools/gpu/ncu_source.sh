#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: where one kernel's warps wait, instruction by
# instruction. Nsight Compute's source counters (warp-state sampling) on the second launch of the
# kernels matching KERNEL_REGEX in one benchmark call; writes LOGDIR/NAME.ncu-rep, the SASS page
# with its samples (NAME-sass.csv) and the section details (NAME-details.csv), and prints the
# instructions holding the most samples and the samples per opcode family. Samples cover every
# warp of the kernel (producer and writer warps waiting on barriers included).
# usage: tools/gpu/ncu_source.sh LOGDIR NAME KERNEL_REGEX BENCHMARK_ARGS...
#   e.g. tools/gpu/ncu_source.sh /tmp/src d128c fa3::bwd_kernel --backend fa3 \
#          --shape 8,2048,2048,16,128 --causal 1 --direction bwd --warmup 1 --repeats 1 --no-naive
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
usage="usage: tools/gpu/ncu_source.sh LOGDIR NAME KERNEL_REGEX BENCHMARK_ARGS..."
logdir="${1:?$usage}" name="${2:?$usage}" kernel="${3:?$usage}"
shift 3
(($# > 0)) || fa_die "$usage"
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
ncu_bin="$(fa_ncu_binary)"
"$ncu_bin" --section SourceCounters --section WarpStateStats --section SchedulerStats --kernel-name-base demangled \
  -k "regex:$kernel" --launch-skip 1 --launch-count 1 -f -o "$logdir/$name" "$bench" "$@" >"$logdir/$name.log" 2>&1 ||
  { tail -n 20 "$logdir/$name.log"; fa_die "ncu failed (log: $logdir/$name.log)"; }
"$ncu_bin" -i "$logdir/$name.ncu-rep" --page source --csv --print-source sass >"$logdir/$name-sass.csv"
"$ncu_bin" -i "$logdir/$name.ncu-rep" --page details --csv >"$logdir/$name-details.csv"
python3 - "$logdir/$name-sass.csv" <<'PY'
import csv, re, sys
from collections import defaultdict
rows = list(csv.reader(open(sys.argv[1])))
head_at = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
head, data = rows[head_at], [r for r in rows[head_at + 1:] if len(r) > 3]
samples_at = head.index("Warp Stall Sampling (All Samples)")
executed_at = head.index("Instructions Executed")
source_at = head.index("Source")
def number(x):
    return float(x.replace(",", "")) if x.strip() else 0.0
total = sum(number(r[samples_at]) for r in data) or 1.0
print(f"{len(data)} instructions, {total:.0f} warp samples")
print("top instructions (index, % of samples, times executed, SASS):")
ranked = sorted(range(len(data)), key=lambda i: -number(data[i][samples_at]))
for i in ranked[:30]:
    r = data[i]
    print(f"  {i:5d} {100 * number(r[samples_at]) / total:5.1f} % {r[executed_at]:>10s}  {r[source_at].strip()[:90]}")
families = defaultdict(float)
for r in data:
    op = re.sub(r"^@!?U?P\w+\s+", "", r[source_at].strip()).split(" ")[0].split(".")[0]
    families[op] += number(r[samples_at])
print("samples per opcode:", ", ".join(f"{op} {100 * v / total:.1f} %" for op, v in sorted(families.items(), key=lambda kv: -kv[1])[:14]))
PY
