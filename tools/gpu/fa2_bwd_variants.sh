#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA2 backward over the peers grid in its
# measurement variants (flashattn_bench --fa2-bwd-plan, src/fa2/bwd_plan.h) beside torch SDPA's
# flash and cuDNN backwards from the same run. A variant's rows are the calls its plan can run (the
# others are skipped). Variants: default (two key tiles per warp where they fit, d64 on 128 rows
# per step); kt1 = one key tile per warp (64 rows per step; d256 has it on one stage only:
# kt1s1); kt2s = two key tiles with d64 on 64 rows per step; bulk = dQ tiles added by bulk
# reductions at every head dim (sm90; the default takes them at d256 only); atomic = dQ by vector
# atomics at every head dim.
# FA2_BWD_VARIANTS="default kt1 kt2s" picks others (the default: default atomic bulk).
# Writes LOGDIR/<variant>.json, LOGDIR/peers.json and LOGDIR/table.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa2_bwd_variants.sh LOGDIR}"
mkdir -p "$logdir"
variants=("default:" "kt1:--fa2-bwd-plan key_tiles=1,block_m=64" "kt1s1:--fa2-bwd-plan key_tiles=1,stages=1"
  "kt2s:--fa2-bwd-plan key_tiles=2,block_m=64" "bulk:--fa2-bwd-plan dq_bulk=1" "atomic:--fa2-bwd-plan dq_bulk=0")
wanted="${FA2_BWD_VARIANTS:-default atomic bulk}"
fa_run_variants fa2 bwd "$logdir" "$wanted" "${variants[@]}"
