#!/usr/bin/env bash
# From a fresh machine to benchmark numbers: installs missing build dependencies, builds
# (Release, every core) and runs flashattn_bench on the best device present: the GPU when
# nvidia-smi sees one (grid "peers"), else the CPU (grid "small", about a minute on 2 cores).
# Extra arguments go to flashattn_bench, e.g. `bash tools/run.sh --grid decode` (see --help).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fa_ensure_deps 1
fa_configure "$FA_ROOT/build"
fa_build "$FA_ROOT/build" flashattn_bench
bench="$FA_ROOT/build/bench/flashattn_bench"

if fa_gpu_present; then
  fa_log "GPU found: $(nvidia-smi -L | head -n1)"
  grid_args=(--grid peers)  # unless the caller picked a grid or a shape
  if [[ " $* " == *" --grid"* || " $* " == *" --shape"* ]]; then grid_args=(); fi
  if "$bench" --backend auto "${grid_args[@]}" --json "$FA_ROOT/build/bench-gpu.json" "$@"; then
    fa_log "results: $FA_ROOT/build/bench-gpu.json"
    exit 0
  fi
  # The GPU kernels are still being written; show the CPU numbers too, but report the failure.
  fa_log "the GPU benchmark failed (message above); running the CPU benchmark instead"
  "$bench" --backend cpu --grid small --json "$FA_ROOT/build/bench-cpu.json" || true
  exit 1
fi

fa_log "no GPU found: benchmarking the CPU backend"
"$bench" --backend cpu --json "$FA_ROOT/build/bench-cpu.json" "$@"
fa_log "results: $FA_ROOT/build/bench-cpu.json"
