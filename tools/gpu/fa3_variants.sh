#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA3 forward over the peers grid in its
# measurement variants (flashattn_bench --fa3-fwd-plan, src/fa3/fwd_plan.h) beside torch SDPA's
# flash and cuDNN backends from the same run. A variant's rows are the calls its plan can run (the
# others are skipped: n144 runs d128 only, c2 d64 only). Variants: default; pp0 / pp1 =
# ping-pong off / on (d64 has no kernels without it); n128 / n144 / n176 = the key tile forced to
# that width; c2 = two consumer warpgroups (128 x 128); sN = the dynamic schedule's sections of N
# MB of K and V (s0: one head per section); reg = O stored from registers (the default stages it in
# shared memory for TMA stores on dense calls from a value head dim of 128); tma = TMA stores at
# every head dim.
# FA3_VARIANTS="default c2" runs a subset.
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa3_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("default:" "pp0:--fa3-fwd-plan pingpong=0" "pp1:--fa3-fwd-plan pingpong=1" "n128:--fa3-fwd-plan block_n=128"
  "n144:--fa3-fwd-plan block_n=144" "n176:--fa3-fwd-plan block_n=176" "c2:--fa3-fwd-plan consumers=2,block_n=128"
  "s0:--fa3-fwd-plan section_mb=0" "s8:--fa3-fwd-plan section_mb=8"
  "s16:--fa3-fwd-plan section_mb=16" "s32:--fa3-fwd-plan section_mb=32" "s64:--fa3-fwd-plan section_mb=64"
  "reg:--fa3-fwd-plan tma_store=0" "tma:--fa3-fwd-plan tma_store=1")
wanted="${FA3_VARIANTS:-default pp0 n128 n144 c2 s0 s16 s32}"
fa_run_variants fa3 fwd "$logdir" "$wanted" "${variants[@]}"
