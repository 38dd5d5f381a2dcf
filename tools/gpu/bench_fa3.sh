#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/ (tools/gpu/test.sh or bench.sh): the FA3 forward
# over the peers grid (head dims 64/128/256, causal and not, seqlen 512..16k, bf16) beside torch
# SDPA's flash and cuDNN forwards from the same run, joined into LOGDIR/table.md with ratios.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
logdir="${1:?usage: tools/gpu/bench_fa3.sh LOGDIR}"
mkdir -p "$logdir"
bench="$root/build-gpu/bench/flashattn_bench"
[[ -x "$bench" ]] || { echo "build flashattn_bench first (tools/gpu/bench.sh)" >&2; exit 1; }
if grep -q '^FLASHATTN_HANG_TRAP:BOOL=ON' "$root/build-gpu/CMakeCache.txt"; then
  echo "build-gpu/ has the mbarrier hang trap (it spills): rebuild without it first" >&2
  exit 1
fi
"$bench" --backend fa3 --grid peers --direction fwd --json "$logdir/fa3.json" >"$logdir/fa3.txt"
python3 "$root/bench/peers/sdpa_peers.py" --direction fwd --json "$logdir/peers.json" >"$logdir/peers.txt"
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "$logdir/fa3.json" | tee "$logdir/table.md"
