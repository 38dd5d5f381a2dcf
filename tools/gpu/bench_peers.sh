#!/usr/bin/env bash
# On the GPU machine: our kernels and torch SDPA's FLASH_ATTENTION / CUDNN_ATTENTION backends over the
# peers grid (bf16, ../shared/PEERS.md), in the same run, joined into LOGDIR/table.md with ratios.
# Runs: fa2 fwd+bwd, fa3 fwd (cases fa3 does not cover are skipped), then the SDPA peers (and a
# bf16 GEMM).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
logdir="${1:?usage: tools/gpu/bench_peers.sh LOGDIR}"
mkdir -p "$logdir"
bash "$root/tools/gpu/bench.sh" "$logdir/fa2" --backend fa2 --grid peers --direction both
"$root/build-gpu/bench/flashattn_bench" --backend fa3 --grid peers --direction fwd \
  --json "$logdir/fa3.json" | tee "$logdir/fa3.txt"
python3 "$root/bench/peers/sdpa_peers.py" --direction both --json "$logdir/peers.json" | tee "$logdir/peers.txt"
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "$logdir/fa2/bench.json" "$logdir/fa3.json" \
  | tee "$logdir/table.md"
# The bf16 GEMM rate of the same run, under the table.
{ echo; grep '^# bf16 GEMM' "$logdir/peers.txt" || true; } | tee -a "$logdir/table.md"
