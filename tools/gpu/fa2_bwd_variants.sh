#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 backward over the peers grid in its
# measurement variants (src/fa2/bwd_tuning.h) beside torch SDPA's flash and cuDNN backwards from
# the same run. Variants: kt1 / kt2 = one / two key tiles per warp; kt1d / kt2d = the same with dQ
# added straight from the accumulators (sm90). FA2_BWD_VARIANTS="kt1 kt2" runs a subset.
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
root="$FA_ROOT"
logdir="${1:?usage: tools/gpu/fa2_bwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
bench="$(fa_benchmark_binary)"
variants=("kt1:FLASHATTN_FA2_BWD_KEY_TILES=1" "kt2:FLASHATTN_FA2_BWD_KEY_TILES=2"
  "kt1d:FLASHATTN_FA2_BWD_KEY_TILES=1 FLASHATTN_FA2_BWD_DQ_DIRECT=1"
  "kt2d:FLASHATTN_FA2_BWD_KEY_TILES=2 FLASHATTN_FA2_BWD_DQ_DIRECT=1")
wanted=" ${FA2_BWD_VARIANTS:-kt1 kt2 kt1d kt2d} "
jsons=()
for v in "${variants[@]}"; do
  name="${v%%:*}" setting="${v#*:}"
  [[ "$wanted" == *" $name "* ]] || continue
  # shellcheck disable=SC2086  # setting is NAME=VALUE words
  env $setting "$bench" --backend fa2 --grid peers --direction bwd --json "$logdir/$name.json" >"$logdir/$name.txt"
  fa_rename_backend "$logdir/$name.json" "fa2-$name"
  jsons+=("$logdir/$name.json")
done
python3 "$root/bench/peers/sdpa_peers.py" --direction bwd --json "$logdir/peers.json" >"$logdir/peers.txt"
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "${jsons[@]}" | tee "$logdir/table.md"
