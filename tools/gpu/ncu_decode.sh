#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: Nsight Compute on one decode step of ours
# (fwd_kvcache through the benchmark: the attention kernel and the split-KV combine) and of cuDNN
# (torch SDPA's CUDNN_ATTENTION, every kernel of one call) for the same shapes: one query, GQA 32/8,
# d128, bf16, dense cache. Writes LOGDIR/<ours|cudnn>-<b>x<sk>.txt and prints per kernel its
# launch (grid, block, registers, shared memory), duration, DRAM throughput and occupancy.
# usage: tools/gpu/ncu_decode.sh LOGDIR [BATCH,KEYS ...]   (default 1,8192 8,8192 8,32768)
# NCU_DECODE_ARGS: more benchmark arguments for ours (e.g. "--num-splits 8"); NCU_DECODE_CUDNN=0
# profiles ours only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/ncu_decode.sh LOGDIR [BATCH,KEYS ...]}"
shift
shapes=("$@")
((${#shapes[@]} > 0)) || shapes=(1,8192 8,8192 8,32768)
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
ncu_bin="$(fa_ncu_binary)"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
  --section WarpStateStats --section SchedulerStats)
for shape in "${shapes[@]}"; do
  b="${shape%,*}" sk="${shape#*,}"
  # One warm-up call, then the timed call's two kernels (the L2 flush between them is a memset).
  # shellcheck disable=SC2086  # NCU_DECODE_ARGS: benchmark arguments
  "$ncu_bin" --clock-control none -k "regex:fwd_kernel|combine" -s 2 -c 2 "${sections[@]}" \
    "$bench" --backend auto --shape "$b,1,$sk,32,128,8" --kvcache dense --warmup 1 --repeats 1 ${NCU_DECODE_ARGS:-} \
    >"$logdir/ours-${b}x$sk.txt" 2>&1 || true
  [[ "${NCU_DECODE_CUDNN:-1}" == 1 ]] || continue
  "$ncu_bin" --clock-control none --profile-from-start off -c 8 "${sections[@]}" python3 - "$b" "$sk" \
    >"$logdir/cudnn-${b}x$sk.txt" 2>&1 <<'PY' || true
import sys, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
b, sk = map(int, sys.argv[1:3])
q = torch.randn(b, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(b, sk, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        sdpa(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    sdpa(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
PY
done
grep -H -E "^  [A-Za-z_].*\(|Duration|DRAM Throughput|Grid Size|Block Size|Registers Per Thread|Dynamic Shared Memory Per Block|Achieved Occupancy|Waves Per SM|No Eligible|Warp Cycles Per Issued" \
  "$logdir"/*.txt | sed "s|$logdir/||" || true
