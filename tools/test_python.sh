#!/usr/bin/env bash
# Builds the Python package into a private venv (build/python-venv) and runs its tests
# (pytest tests/python). tools/test.sh calls it, so CI runs it. Without torch in that venv the
# torch tests skip; the numpy tests (the CPU backend through the extension) always run.
# The package is built CPU-only here (FLASHATTN_CUDA=OFF): the tests need no GPU code and the
# CUDA sources are compiled by the C++ build already.
# pyflakes checks the package, the tools and the tests first (undefined names, unused imports).
# FA_WITH_TORCH=1 also installs torch and Transformers from PyPI (about 4 GB with CUDA's libraries):
# the torch ops, autograd, the drop-in interfaces and the Transformers tests then run on CPU
# tensors, which catches a broken torch path without a GPU.
# Extra arguments go to pytest, e.g. -k kvcache.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fa_setup_path
venv="$FA_ROOT/build/python-venv"
if [[ ! -x "$venv/bin/python" ]]; then
  command -v python3 >/dev/null 2>&1 || fa_apt_install python3 || fa_die "python3 is missing"
  if ! python3 -m venv "$venv"; then
    rm -rf "$venv"
    fa_apt_install python3-venv || fa_die "cannot create a Python venv (install python3-venv)"
    python3 -m venv "$venv"
  fi
fi
fa_log "installing the Python build and test tools into $venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "nanobind>=2.0" ninja numpy pytest pyflakes
if [[ "${FA_WITH_TORCH:-0}" == 1 ]]; then
  fa_log "installing torch and Transformers into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch>=2.4" transformers
fi
fa_log "building and installing the flashattn Python package (CPU backend)"
# No build isolation: the tools above are used as installed (also what works offline).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  -C cmake.define.FLASHATTN_CUDA=OFF -C build-dir="$FA_ROOT/build/python-ci" "$FA_ROOT"
# Names that do not exist fail here, before a GPU call would: CI's venv has no torch, so the torch
# path and the GPU tools only run on a device.
fa_log "pyflakes: python/flashattn tools tests/python"
(cd "$FA_ROOT" && "$venv/bin/python" -m pyflakes python/flashattn tools tests/python) \
  || fa_die "pyflakes found problems (listed above)"
fa_log "running the Python tests"
cd "$FA_ROOT"
"$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider "$@"
