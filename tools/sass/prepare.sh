#!/usr/bin/env bash
# Run on a development machine without the CUDA toolkit's cuobjdump/nvdisasm (this project's has
# nvcc and ptxas only): fetches NVIDIA's cuobjdump and nvdisasm wheels (pip, CUDA 13) into
# .deps/sass-tools/ and prints the bin directory, so that SASS can be read without a GPU machine
# (tools/sass/waits.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
dest="$FA_ROOT/.deps/sass-tools"
bin="$dest/nvidia/cu13/bin"
if [[ ! -x "$bin/cuobjdump" || ! -x "$bin/nvdisasm" ]]; then
  mkdir -p "$dest/wheels"
  python3 -m pip download --quiet --no-deps -d "$dest/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
    fa_die "pip could not fetch nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm"
  for w in "$dest"/wheels/*.whl; do python3 -m zipfile -e "$w" "$dest"; done
  chmod +x "$bin"/* 2>/dev/null || true
fi
[[ -x "$bin/cuobjdump" ]] || fa_die "no cuobjdump under $bin"
echo "$bin"
