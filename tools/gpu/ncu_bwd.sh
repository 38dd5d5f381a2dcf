#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: where one backward call's time goes. Nsight
# Compute on every kernel of one timed backward of ours (row statistics, main kernel, dQ
# conversion; the workspace memset is not a kernel), with its duration, DRAM bytes and throughput,
# beside the benchmark's CUDA-event time of the whole call (the difference is the memset and the
# gaps). Writes LOGDIR/bwd-<shape>.csv and prints one line per kernel.
# usage: tools/gpu/ncu_bwd.sh LOGDIR [B,S,H,D,CAUSAL ...]  (default: peers-grid shapes at 2k and 8k,
#        d64/d128/d256, causal and not). NCU_BWD_ARGS: more benchmark arguments (e.g. --backend fa2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/ncu_bwd.sh LOGDIR [B,S,H,D,CAUSAL ...]}"
shift
shapes=("$@")
((${#shapes[@]} > 0)) || shapes=(8,2048,32,64,0 8,2048,32,64,1 8,2048,16,128,0 8,2048,16,128,1 8,2048,8,256,0
  8,2048,8,256,1 2,8192,16,128,0 2,8192,16,128,1)
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
ncu_bin="$(fa_ncu_binary)"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for shape in "${shapes[@]}"; do
  IFS=, read -r b s h d causal <<<"$shape"
  # shellcheck disable=SC2086  # NCU_BWD_ARGS: benchmark arguments
  ms=$("$bench" --backend fa3 --shape "$b,$s,$s,$h,$d" --causal "$causal" --direction bwd --warmup 2 --repeats 10 \
    --no-naive ${NCU_BWD_ARGS:-} 2>&1 | awk '/^fa[23]/ {v = $0} END {print v}')
  # The forward (not timed), one warm-up backward, then the profiled backward's kernels.
  # shellcheck disable=SC2086
  "$ncu_bin" --clock-control none --csv --print-units base --metrics "$metrics" "$bench" --backend fa3 --shape "$b,$s,$s,$h,$d" \
    --causal "$causal" --direction bwd --warmup 1 --repeats 1 --no-naive ${NCU_BWD_ARGS:-} >"$logdir/bwd-$shape.csv" 2>&1 || true
  echo "== $shape: bench: $ms"
  python3 - "$logdir/bwd-$shape.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
ix = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
kernels = {}
for r in rows:
    k = kernels.setdefault(int(r[ix["ID"]]), {"name": r[ix["Kernel Name"]].split("(")[0].split("<")[0]})
    k[r[ix["Metric Name"]]] = float(r[ix["Metric Value"]].replace(",", ""))
ids = sorted(kernels)
last = [i for i in ids if "row_stats" in kernels[i]["name"]][-1]  # the profiled call starts here
total = 0.0
for i in ids[ids.index(last):]:
    k = kernels[i]
    us = k["gpu__time_duration.sum"] / 1e3
    total += us
    mb = (k["dram__bytes_read.sum"] + k["dram__bytes_write.sum"]) / 1e6
    print(f"  {k['name'][:40]:40s} {us:9.1f} us  {mb:8.1f} MB  {mb / us:6.2f} TB/s  dram {k['dram__throughput.avg.pct_of_peak_sustained_elapsed']:5.1f} %")
print(f"  kernels {total:.1f} us")
PY
done
