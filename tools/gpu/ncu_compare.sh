#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: Nsight Compute on one launch of our kernel and of
# the peer's for the same shape (bf16, 4k tokens, causal off), for the FA2 backward main kernel
# against torch SDPA's FA2 backward, per head dim. Writes LOGDIR/<ours|torch>-<dir>-d<d>.txt
# (speed of light, warp states, scheduler, memory and compute sections) and prints the lines that
# compare them. NCU_DIMS="128 256" picks head dims; NCU_DIR=fwd profiles our FA3 forward instead.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/ncu_compare.sh LOGDIR}"
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
dir="${NCU_DIR:-bwd}"
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats)
# ncu leaves the clocks alone (the device notes: --clock-control none). The third launch of the
# kernel is profiled (after two warm-ups).
ncu_bin="$(fa_ncu_binary)"
profile() {
  local out="$1" regex="$2"
  shift 2
  "$ncu_bin" --clock-control none --target-processes all -k "regex:$regex" -s 2 -c 1 "${sections[@]}" "$@" >"$out" 2>&1 || true
}
for d in ${NCU_DIMS:-128 256}; do
  seqlen=4096 batch=4 heads=$((2048 / d))
  if [[ "$dir" == bwd ]]; then
    profile "$logdir/ours-bwd-d$d.txt" bwd_main_kernel "$bench" --backend fa2 --shape "$batch,$seqlen,$seqlen,$heads,$d" \
      --causal 0 --direction bwd --warmup 3 --repeats 1 --no-naive
    profile "$logdir/torch-bwd-d$d.txt" "flash_bwd_dq_dk_dv" python3 - "$batch" "$seqlen" "$heads" "$d" <<'PY'
import sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
b, s, h, d = map(int, sys.argv[1:5])
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(3):
        out = sdpa(q, k, v)
        out.backward(torch.randn_like(out))
torch.cuda.synchronize()
PY
  else
    profile "$logdir/ours-fa3-fwd-d$d.txt" fwd_kernel "$bench" --backend fa3 \
      --shape "$batch,$seqlen,$seqlen,$heads,$d" --causal 0 --direction fwd --warmup 3 --repeats 1 --no-naive
  fi
done
# The comparison lines: duration, throughput, issue and stall summaries.
grep -H -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per Thread|Achieved Occupancy|Shared Memory Configuration Size|Executed Ipc Active|Mem Busy|Max Bandwidth|L2 Hit Rate" \
  "$logdir"/*.txt | sed "s|$logdir/||" || true
