#!/usr/bin/env bash
# On a GPU machine: times the FA2 forward's alternative tilings (FLASHATTN_FA2_FWD_VARIANT=0..4,
# see src/fa2/fwd_launch.cu) at seqlen 8k for d 64/128/256, causal and not, and prints one line per
# run. Used to choose the default tiles; results go to docs/PERF.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
fa_setup_path
fa_ensure_deps 0
log="$(mktemp)"
want_tests=OFF
fa_gtest_available && want_tests=ON  # same configuration as tools/gpu/test.sh: no rebuild after it
fa_gpu_configure "$log" "$want_tests" >/dev/null || fa_die "configure failed (see $log)"
fa_build "$FA_GPU_BUILD" flashattn_bench >>"$log" 2>&1 || fa_die "build failed (see $log)"
for variant in 0 1 2 3 4; do
  for d in 64 128 256; do
    for causal in 0 1; do
      FLASHATTN_FA2_FWD_VARIANT=$variant "$FA_GPU_BUILD/bench/flashattn_bench" --backend fa2 \
        --shape "2,8192,8192,$((2048 / d)),$d" --causal "$causal" --direction fwd 2>&1 |
        awk -v v="$variant" '/^fa2/ {print "variant", v, "d", $8, "causal", $9, "TFLOP/s", $12}'
    done
  done
done
