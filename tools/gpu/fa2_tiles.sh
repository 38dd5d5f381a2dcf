#!/usr/bin/env bash
# On a GPU machine: times the FA2 forward on its default plan and on the base tiles
# (flashattn_bench --fa2-fwd-plan base=1, src/fa2/fwd_plan.h) at seqlen 8k for d 64/128/256, causal
# and not, and prints one line per run; FA2_TILE_PLANS="default base=1 block_m=64,block_n=64"
# (the default: "default base=1") picks the plans, each a --fa2-fwd-plan value or "default".
# Used to choose the default tiles; results go to docs/PERF.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
fa_setup_path
fa_ensure_deps 0
log="$(mktemp)"
want_tests=OFF
fa_gtest_available && want_tests=ON  # same configuration as tools/gpu/test.sh: no rebuild after it
fa_gpu_configure "$log" "$want_tests" >/dev/null || fa_die "configure failed (see $log)"
fa_build "$FA_GPU_BUILD" flashattn_bench >>"$log" 2>&1 || fa_die "build failed (see $log)"
for plan in ${FA2_TILE_PLANS:-default base=1}; do
  args=()
  [[ "$plan" == default ]] || args=(--fa2-fwd-plan "$plan")
  for d in 64 128 256; do
    for causal in 0 1; do
      "$FA_GPU_BUILD/bench/flashattn_bench" --backend fa2 "${args[@]}" \
        --shape "2,8192,8192,$((2048 / d)),$d" --causal "$causal" --direction fwd 2>&1 |
        awk -v v="$plan" '/^fa2/ {print "plan", v, "d", $8, "causal", $9, "TFLOP/s", $12} /^# skipped/ {print "plan", v, $0}'
    done
  done
done
