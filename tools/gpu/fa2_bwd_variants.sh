#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 backward over the peers grid in its
# measurement variants (src/fa2/bwd_tuning.h) beside torch SDPA's flash and cuDNN backwards from
# the same run. Variants: kt1 / kt2 = one / two key tiles per warp (two is the default; d64 then
# takes 128 rows per step, and each CTA starts at its own row block); kt2s = two key tiles with d64
# on 64 rows per step; inorder = the default with every CTA's rows in ascending order; bulk = dQ
# tiles added by bulk reductions at every head dim (sm90; the default takes them at d256 only);
# atomic = dQ by vector atomics at every head dim.
# FA2_BWD_VARIANTS="kt1 kt2 kt2s inorder" picks others (the default: kt2 atomic bulk).
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa2_bwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("kt1:FLASHATTN_FA2_BWD_KEY_TILES=1" "kt2:FLASHATTN_FA2_BWD_KEY_TILES=2"
  "kt2s:FLASHATTN_FA2_BWD_KEY_TILES=2 FLASHATTN_FA2_BWD_BLOCK_M=64" "inorder:FLASHATTN_FA2_BWD_ROTATE=0"
  "bulk:FLASHATTN_FA2_BWD_DQ_BULK=1" "atomic:FLASHATTN_FA2_BWD_DQ_BULK=0")
wanted="${FA2_BWD_VARIANTS:-kt2 atomic bulk}"
fa_run_variants fa2 bwd "$logdir" "$wanted" "${variants[@]}"
