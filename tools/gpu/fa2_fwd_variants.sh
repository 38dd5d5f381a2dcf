#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 forward over the peers grid in its tile
# plans (flashattn_bench --fa2-fwd-plan, src/fa2/fwd_plan.h) beside torch SDPA's flash and cuDNN
# forwards from the same run. Variants: default; base = the base tiles (what sm80 runs: 64 x 32 at
# d256 instead of sm90's 128 x 64 with 8 warps). FA2_FWD_VARIANTS="default base" (the default)
# picks the ones to run. Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa2_fwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("default:" "base:--fa2-fwd-plan base=1")
wanted="${FA2_FWD_VARIANTS:-default base}"
fa_run_variants fa2 fwd "$logdir" "$wanted" "${variants[@]}"
