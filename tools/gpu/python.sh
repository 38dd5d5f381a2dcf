#!/usr/bin/env bash
# On the GPU machine: builds the Python package with its CUDA backends (sm_90a unless
# FA_GPU_GENCODE says otherwise) into the interpreter that holds torch, and runs the Python suite
# there: the torch tests on CUDA tensors, Transformers through flash_attention_2/_3 against SDPA
# (logits and gradients), FA3's interface, fp8, the fuzz driver. Writes LOGDIR/install.log,
# LOGDIR/pytest.log and LOGDIR/summary.txt. Extra arguments go to pytest (e.g. -k transformers).
# The image has scikit-build-core and nanobind; elsewhere carry their wheels (.whl, README).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/python.sh LOGDIR [pytest args]}"
shift
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
fa_setup_path
python="${FA_PYTHON:-python3}"
start=$SECONDS
if ! fa_install_python "$logdir/install.log"; then
  echo "install: FAILED (see install.log)" | tee "$logdir/summary.txt"
  tail -n 30 "$logdir/install.log"
  exit 1
fi
echo "install: ok in $((SECONDS - start)) s" | tee "$logdir/summary.txt"
cd "$FA_ROOT"
"$python" -c 'import torch, flashattn; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "flashattn", flashattn.__file__)' \
  2>&1 | tee -a "$logdir/summary.txt"
PYTHONUNBUFFERED=1 timeout "${FA_PYTEST_TIMEOUT:-480}" "$python" -m pytest -q -p no:cacheprovider -rs \
  tests/python "$@" >"$logdir/pytest.log" 2>&1
status=$?
echo "pytest: exit $status: $(tail -n 1 "$logdir/pytest.log")" | tee -a "$logdir/summary.txt"
grep -E '^(FAILED|ERROR)' "$logdir/pytest.log" | head -n 30
exit $status
