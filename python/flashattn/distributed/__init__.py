"""Context parallelism on torch.distributed: attention over a sequence sharded across the ranks of
a process group (NCCL for CUDA tensors, gloo for host tensors).

* ``ring_flash_attn_func`` / ``ring_flash_attn_varlen_func``: K/V travel around the ring while
  each rank attends to the block it holds; partial outputs merge by log-sum-exp (exact).
* ``ulysses_attn_func`` / ``ulysses_attn_varlen_func``: all-to-all from sequence- to head-sharded,
  local attention over the whole sequence, all-to-all back.
* ``shard`` / ``unshard`` (and ``zigzag_*``, ``contiguous_*``, ``*_varlen``): the layouts.

Names resolve on first use, so importing this package (or flashattn) does not import torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ring_flash_attn_func": "ring",
    "ring_flash_attn_varlen_func": "ring",
    "ulysses_attn_func": "ulysses",
    "ulysses_attn_varlen_func": "ulysses",
    "shard": "layout",
    "unshard": "layout",
    "zigzag_shard": "layout",
    "zigzag_unshard": "layout",
    "contiguous_shard": "layout",
    "contiguous_unshard": "layout",
    "shard_varlen": "layout",
    "unshard_varlen": "layout",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'flashattn.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)


def __dir__() -> list:
    return sorted(set(globals()) | set(_WHERE))
