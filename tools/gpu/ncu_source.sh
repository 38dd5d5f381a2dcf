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
python3 - "$logdir/$name-sass.csv" "$FA_ROOT" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tools", "sass"))
from ncu_opcode_diff import load, per_opcode
lines = load(sys.argv[1])
total = sum(x[3] for x in lines) or 1.0
print(f"{len(lines)} instructions, {total:.0f} warp samples")
print("top instructions (index, % of samples, times executed, SASS):")
for i in sorted(range(len(lines)), key=lambda i: -lines[i][3])[:30]:
    _, _, executed, samples, text = lines[i]
    print(f"  {i:5d} {100 * samples / total:5.1f} % {executed:>10.0f}  {text[:90]}")
families = per_opcode(lines, 3)
print("samples per opcode:", ", ".join(f"{op} {100 * v / total:.1f} %" for op, v in sorted(families.items(), key=lambda kv: -kv[1])[:14]))
PY
