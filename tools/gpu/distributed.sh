#!/usr/bin/env bash
# On a GPU machine: installs the Python package with the CUDA backends into the machine's python3
# (the README's GPU recipe: /usr/bin/g++, sm_90a only unless FA_GPU_GENCODE says otherwise) and runs
# the context-parallel tests, tests/python/test_distributed.py and test_ring_plan.py:
#   gloo + host tensors (CPU backend), 2 and 4 ranks;
#   gloo + CUDA tensors (staged through the host), 2 ranks on the visible GPU(s);
#   NCCL + CUDA tensors, one rank per GPU: 2 ranks with >= 2 GPUs, 4 with >= 4 (skipped otherwise).
# FA_RING_BENCH=1 then runs tools/gpu/ring_bench.py on every GPU (torchrun), FA_RING_BENCH_ARGS
# replacing its default arguments.
# Writes into LOGDIR: nvidia-smi.txt, build.log, pytest.log, summary.txt (and ring_bench.txt/.json).
# Exit status: 0 when the package built and every test passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/distributed.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
summary="$logdir/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary" >&2; }

# NVLink multicast stays off on the shared machines (the device notes): NCCL must not use it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{ date -u; nvidia-smi || echo "nvidia-smi failed"; nvidia-smi topo -m || true; } >"$logdir/nvidia-smi.txt" 2>&1
fa_setup_path
start=$SECONDS
if ! fa_install_python "$logdir/build.log"; then
  note "build: FAILED after $((SECONDS - start)) s (see build.log)"
  exit 1
fi
gpus="$(python3 -c 'import torch; print(torch.cuda.device_count())')"
note "build: ok in $((SECONDS - start)) s; torch sees $gpus GPU(s)"

cd "$FA_ROOT"
status=0
python3 -m pytest tests/python/test_distributed.py tests/python/test_ring_plan.py -q -rs -p no:cacheprovider \
  >"$logdir/pytest.log" 2>&1 || status=1
note "tests: $([[ $status == 0 ]] && echo ok || echo FAILED) ($(tail -n1 "$logdir/pytest.log"))"
grep -E '^(FAILED|ERROR)' "$logdir/pytest.log" | head -n 20 >>"$summary" || true

if [[ "${FA_RING_BENCH:-0}" == 1 ]]; then
  # shellcheck disable=SC2086  # FA_RING_BENCH_ARGS is a list of words
  if torchrun --standalone --nproc_per_node="$gpus" tools/gpu/ring_bench.py --json "$logdir/ring_bench.json" \
      ${FA_RING_BENCH_ARGS:-} >"$logdir/ring_bench.txt" 2>&1; then
    note "ring_bench: ok (ring_bench.txt)"
  else
    note "ring_bench: FAILED (see ring_bench.txt)"
    status=1
  fi
fi
exit "$status"
