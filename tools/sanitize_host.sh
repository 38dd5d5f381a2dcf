#!/usr/bin/env bash
# Builds the host code (CPU backend, validation, tests) with AddressSanitizer and UBSan in
# build-asan/ and runs the fuzz tests and the validation suite under them: an out-of-bounds read,
# a use after free or undefined behaviour (signed overflow, misaligned access, ...) fails the run.
# Extra arguments go to ctest, e.g. -R Fuzz. FLASHATTN_FUZZ_CASES / FLASHATTN_FUZZ_SEED apply.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fa_ensure_deps 1
build="$FA_ROOT/build-asan"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
fa_configure "$build" -DFLASHATTN_CUDA=OFF -DFLASHATTN_BUILD_BENCH=OFF -DFLASHATTN_NATIVE=OFF \
  "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
fa_build "$build" flashattn_tests
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
cd "$build"
if (($#)); then
  ctest --output-on-failure -j "$FA_JOBS" "$@"
else
  # (install_find_package installs a package, not what this checks; the benchmark's tests need the
  # benchmark, which this build leaves out)
  ctest --output-on-failure -j "$FA_JOBS" -E 'install_find_package|flashattn_bench_tests'
fi
