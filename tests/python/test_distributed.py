"""Context parallelism (flashattn.distributed) in real multi-process groups: ring and Ulysses
attention, forward and backward, against attention over the whole sequence in one process
(tests/python/distributed_cases.py has the cases and the comparison).

Configurations: gloo with host tensors (the CPU backend) at world sizes 2 and 4, everywhere torch
is installed; gloo with CUDA tensors (staged through the host) where torch sees a GPU; NCCL with
CUDA tensors where it sees at least 2 GPUs (one rank per GPU). Each configuration starts its
processes once and runs every case; each case is then its own test.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
import time

import pytest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    pytest.skip("torch is not installed: the context-parallel tests need torch.distributed",
                allow_module_level=True)

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch build has no torch.distributed with gloo", allow_module_level=True)

import distributed_cases  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
HAS_NCCL = dist.is_nccl_available()
TIMEOUT_S = 600

CONFIGS = [("gloo", "cpu", 2), ("gloo", "cpu", 4), ("gloo", "cuda", 2), ("nccl", "cuda", 2), ("nccl", "cuda", 4)]
CONFIG_IDS = [f"{b}-{d}-{n}" for b, d, n in CONFIGS]
NAMES = [c.name for c in distributed_cases.CASES]


def _skip_reason(backend: str, device: str, world_size: int):
    if device == "cuda" and GPUS == 0:
        return "no CUDA device visible to torch"
    if backend == "nccl" and not HAS_NCCL:
        return "this torch build has no NCCL"
    if backend == "nccl" and GPUS < world_size:
        return f"NCCL with {world_size} ranks needs {world_size} GPUs (one per rank), torch sees {GPUS}"
    return None


@functools.lru_cache(maxsize=None)
def _results(backend: str, device: str, world_size: int):
    """Runs every case in one group of world_size processes: {rank: {case: "ok" or failure}}."""
    names = NAMES + distributed_cases.ROUND_TRIPS + distributed_cases.ERROR_CASES
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        ctx = mp.start_processes(distributed_cases.worker, nprocs=world_size, join=False, start_method="spawn",
                                 args=(world_size, backend, device, init_file, tmp, names))
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while not ctx.join(timeout=5):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{backend}/{device} x{world_size}: ranks still running after {TIMEOUT_S} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
        results = {}
        for rank in range(world_size):
            with open(os.path.join(tmp, f"rank{rank}.json")) as f:
                results[rank] = json.load(f)
    return results


def _check(config, name):
    reason = _skip_reason(*config)
    if reason:
        pytest.skip(reason)
    results = _results(*config)
    failures = [f"rank {rank}: {per_rank.get(name, 'not run (an earlier case crashed the rank)')}"
                for rank, per_rank in results.items() if per_rank.get(name) != "ok"]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("name", NAMES)
def test_matches_single_process_attention(config, name):
    _check(config, name)


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("name", distributed_cases.ROUND_TRIPS)
def test_unshard_inverts_shard(config, name):
    _check(config, name)


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("name", distributed_cases.ERROR_CASES)
def test_bad_input_raises_on_every_rank(config, name):
    _check(config, name)
