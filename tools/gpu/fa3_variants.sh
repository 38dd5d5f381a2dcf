#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA3 forward over the peers grid in its
# measurement variants (src/fa3/fwd_tuning.h) beside torch SDPA's flash and cuDNN backends from
# the same run. Variants: default; pp0 / pp1 = ping-pong off / on; n128 / n144 / n176 = d128 key tile forced
# to that width;
# c2 = d64 with two consumer warpgroups; p192 = d64 unmasked calls on 192 x 192 with P through shared
# memory (three consumer warpgroups forced); dyn1 / dyn0 = causal, windowed and varlen calls on
# persistent CTAs with the dynamic schedule / on a CTA per tile; sN = the dynamic schedule's sections
# of N MB of K and V (s0: one head per section); reg = O stored from registers (the default stages
# it in shared memory for TMA stores on dense calls).
# FA3_VARIANTS="default c2" runs a subset.
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa3_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("default:" "pp0:FLASHATTN_FA3_PINGPONG=0" "pp1:FLASHATTN_FA3_PINGPONG=1" "n128:FLASHATTN_FA3_D128_BLOCKN=128" "n144:FLASHATTN_FA3_D128_BLOCKN=144"
  "n176:FLASHATTN_FA3_D128_BLOCKN=176" "c2:FLASHATTN_FA3_D64_CONSUMERS=2" "p192:FLASHATTN_FA3_D64_BLOCKN=192 FLASHATTN_FA3_D64_CONSUMERS=3" "dyn1:FLASHATTN_FA3_DYNAMIC=1" "dyn0:FLASHATTN_FA3_DYNAMIC=0"
  "s0:FLASHATTN_FA3_SECTION_MB=0" "s8:FLASHATTN_FA3_SECTION_MB=8" "s16:FLASHATTN_FA3_SECTION_MB=16"
  "s32:FLASHATTN_FA3_SECTION_MB=32" "s64:FLASHATTN_FA3_SECTION_MB=64" "reg:FLASHATTN_FA3_TMA_STORE=0")
wanted="${FA3_VARIANTS:-default pp0 n128 n144 c2 dyn1 dyn0 s0 s16 s32}"
fa_run_variants fa3 fwd "$logdir" "$wanted" "${variants[@]}"
