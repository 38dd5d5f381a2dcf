#!/usr/bin/env bash
# Configures and builds everything in build/ (Release, every core), installing missing build
# dependencies first. Extra arguments go to CMake, e.g. -DFLASHATTN_CUDA=OFF.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fa_ensure_deps 1
fa_configure "$FA_ROOT/build" "$@"
fa_build "$FA_ROOT/build"
