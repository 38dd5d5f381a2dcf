#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 forward over the peers grid in its tile
# variants (FLASHATTN_FA2_FWD_VARIANT, src/fa2/fwd_launch.cu) beside torch SDPA's flash and cuDNN
# forwards from the same run. Variants: default; base = the base tiles (variant 0); v1 / v2 / v3;
# v4 = d256 on 64x64 with 4 warps and one K/V stage (two CTAs per SM; other head dims as default).
# FA2_FWD_VARIANTS="default v4" (the default) picks the ones to run.
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa2_fwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("default:" "base:FLASHATTN_FA2_FWD_VARIANT=0" "v1:FLASHATTN_FA2_FWD_VARIANT=1" "v2:FLASHATTN_FA2_FWD_VARIANT=2"
  "v3:FLASHATTN_FA2_FWD_VARIANT=3" "v4:FLASHATTN_FA2_FWD_VARIANT=4")
wanted="${FA2_FWD_VARIANTS:-default v4}"
fa_run_variants fa2 fwd "$logdir" "$wanted" "${variants[@]}"
