#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/ (tools/gpu/test.sh or bench.sh): the FA3 forward
# over the peers grid (head dims 64/128/256, causal and not, seqlen 512..16k, bf16) beside torch
# SDPA's flash and cuDNN forwards from the same run, joined into LOGDIR/table.md with ratios.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
root="$FA_ROOT"
logdir="${1:?usage: tools/gpu/bench_fa3.sh LOGDIR}"
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
"$bench" --backend fa3 --grid peers --direction fwd --json "$logdir/fa3.json" >"$logdir/fa3.txt"
python3 "$root/bench/peers/sdpa_peers.py" --direction fwd --json "$logdir/peers.json" >"$logdir/peers.txt"
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "$logdir/fa3.json" | tee "$logdir/table.md"
