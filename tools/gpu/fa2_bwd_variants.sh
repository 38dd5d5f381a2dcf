#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 backward over the peers grid with one
# and with two key tiles per warp (FLASHATTN_FA2_BWD_KEY_TILES, src/fa2/bwd_tuning.h) beside torch
# SDPA's flash and cuDNN backwards from the same run. Writes LOGDIR/kt1.json, LOGDIR/kt2.json,
# LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
root="$FA_ROOT"
logdir="${1:?usage: tools/gpu/fa2_bwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
for kt in 1 2; do
  FLASHATTN_FA2_BWD_KEY_TILES=$kt "$bench" --backend fa2 --grid peers --direction bwd --json "$logdir/kt$kt.json" >"$logdir/kt$kt.txt"
  fa_rename_backend "$logdir/kt$kt.json" "fa2-kt$kt"
done
python3 "$root/bench/peers/sdpa_peers.py" --direction bwd --json "$logdir/peers.json" >"$logdir/peers.txt"
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "$logdir/kt1.json" "$logdir/kt2.json" | tee "$logdir/table.md"
