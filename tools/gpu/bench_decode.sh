#!/usr/bin/env bash
# On the GPU machine: the decode grid (fwd_kvcache over dense and paged caches; flashattn_bench
# --help) with backend auto, beside torch SDPA's flash and cuDNN backends over the grid's dense
# one-query shapes and, when .anchors/ holds FlashAttention-3 (see tools/gpu/fa3_bwd.sh for how it
# gets there), FA3's flash_attn_with_kvcache at its decode points (dense and page 256), all in one
# run. Writes ours/ (bench.sh's bench.txt, bench.json), sdpa.json, fa3.json and LOGDIR/table.md:
# GB/s of K+V read per shape, with ratios. FA3_DECODE=0 skips the FA3 build and run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
root="$FA_ROOT"
logdir="${1:?usage: tools/gpu/bench_decode.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
bash "$root/tools/gpu/bench.sh" "$logdir/ours" --backend auto --grid decode
peers=("$logdir/sdpa.json")
python3 "$root/bench/peers/sdpa_peers.py" --grid decode --json "$logdir/sdpa.json" >"$logdir/sdpa.txt"
if [[ "${FA3_DECODE:-1}" == 1 && -f "$root/.anchors/tools/fa3_anchor.sh" ]]; then
  # 'decode' builds FA3's split-KV, paged, append-KV and pack-GQA kernels.
  if (cd "$root" && bash .anchors/tools/fa3_anchor.sh build decode) >"$logdir/anchor-build.log" 2>&1 &&
    PYTHONPATH="$root/.anchors/fa3/hopper" python3 "$root/.anchors/tools/fa3_bench.py" --grid decode --no-sdpa \
      --json "$logdir/fa3.json" >"$logdir/fa3.txt" 2>&1; then
    peers+=("$logdir/fa3.json")
  else
    tail -n 20 "$logdir/anchor-build.log" "$logdir/fa3.txt" 2>/dev/null || true
  fi
fi
python3 "$root/bench/peers/join.py" "${peers[@]}" "$logdir/ours/bench.json" | tee "$logdir/table.md"
