"""Sharding a sequence over the ranks of a group, and gathering it back, in the layouts ring and
Ulysses attention take ("contiguous": rank r holds the r-th of N equal pieces; "zigzag": the r-th
and (2N-1-r)-th of 2N, so that under a causal mask every rank has the same work).

``shard`` is indexing (differentiable); ``unshard`` all-gathers (not differentiable: for
outputs, inspection and tests).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .._errors import ArgumentError
from . import _comm, _plan


def _chunking(n: int, g: _comm.Group, layout: str, name: str, what: str) -> int:
    """The chunk length of an n-long sequence (n must split into equal chunks)."""
    _plan.check_layout(layout)
    chunks = g.size * _plan.chunks_per_rank(layout)
    if n % chunks:
        raise ArgumentError(f"argument '{name}': {what} {n} must be divisible by {chunks} (the {layout} layout "
                            f"over {g.size} ranks)", name)
    return n // chunks


def shard(x: Tensor, dim: int = 1, *, layout: str = "contiguous", group: Optional[Any] = None) -> Tensor:
    """This rank's part of the full sequence x (identical on every rank) along dim."""
    g = _comm.Group(group)
    chunk = _chunking(x.shape[dim], g, layout, "x", f"the length of dim {dim},")
    return torch.cat([x.narrow(dim, c * chunk, chunk) for c in _plan.chunk_ids(layout, g.rank, g.size)], dim)


def unshard(x: Tensor, dim: int = 1, *, layout: str = "contiguous", group: Optional[Any] = None) -> Tensor:
    """The full sequence from every rank's part x (same shape on every rank), on every rank."""
    g = _comm.Group(group)
    _chunking(x.shape[dim] * g.size, g, layout, "x", f"the full length of dim {dim},")
    parts = _comm.all_gather(g, x.detach())
    per_rank = _plan.chunks_per_rank(layout)
    pieces: List[Tensor] = [x] * (g.size * per_rank)
    for rank, part in enumerate(parts):
        for c, piece in zip(_plan.chunk_ids(layout, rank, g.size), part.chunk(per_rank, dim)):
            pieces[c] = piece
    return torch.cat(pieces, dim)


def zigzag_shard(x: Tensor, dim: int = 1, group: Optional[Any] = None) -> Tensor:
    return shard(x, dim, layout="zigzag", group=group)


def zigzag_unshard(x: Tensor, dim: int = 1, group: Optional[Any] = None) -> Tensor:
    return unshard(x, dim, layout="zigzag", group=group)


def contiguous_shard(x: Tensor, dim: int = 1, group: Optional[Any] = None) -> Tensor:
    return shard(x, dim, layout="contiguous", group=group)


def contiguous_unshard(x: Tensor, dim: int = 1, group: Optional[Any] = None) -> Tensor:
    return unshard(x, dim, layout="contiguous", group=group)


def _cu_list(cu_seqlens: Any) -> List[int]:
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype != torch.int32:
            raise ArgumentError(f"argument 'cu_seqlens': must be int32 of shape (batch + 1), got "
                                f"{cu_seqlens.dtype} {tuple(cu_seqlens.shape)}", "cu_seqlens")
        cu_seqlens = cu_seqlens.tolist()
    cu = [int(c) for c in cu_seqlens]
    if not cu or cu[0] != 0 or any(b < a for a, b in zip(cu[:-1], cu[1:])):
        raise ArgumentError(f"argument 'cu_seqlens': must start at 0 and not decrease, got {cu}", "cu_seqlens")
    return cu


def _local_cu(cu: Sequence[int], g: _comm.Group, layout: str) -> List[int]:
    local = [0]
    for a, b in zip(cu[:-1], cu[1:]):
        local.append(local[-1] + _chunking(b - a, g, layout, "cu_seqlens", "every sequence length, here") *
                     _plan.chunks_per_rank(layout))
    return local


def shard_varlen(x: Tensor, cu_seqlens: Any, *, layout: str = "contiguous",
                 group: Optional[Any] = None) -> Tuple[Tensor, Tensor]:
    """Packed sequences x (total, ...) with cu_seqlens (batch + 1): every sequence is sharded on
    its own. Returns (this rank's rows, the local cu_seqlens int32, the same on every rank)."""
    g = _comm.Group(group)
    cu = _cu_list(cu_seqlens)
    local = _local_cu(cu, g, layout)
    pieces = []
    for b, (start, stop) in enumerate(zip(cu[:-1], cu[1:])):
        chunk = (local[b + 1] - local[b]) // _plan.chunks_per_rank(layout)
        pieces += [x[start + c * chunk:start + (c + 1) * chunk] for c in _plan.chunk_ids(layout, g.rank, g.size)]
    device = cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else x.device
    rows = torch.cat(pieces, 0) if pieces else x[:0]
    return rows, torch.tensor(local, dtype=torch.int32, device=device)


def unshard_varlen(x: Tensor, cu_seqlens_local: Any, *, layout: str = "contiguous",
                   group: Optional[Any] = None) -> Tensor:
    """The packed full sequences from every rank's rows x and the local cu_seqlens."""
    g = _comm.Group(group)
    _plan.check_layout(layout)
    cu = _cu_list(cu_seqlens_local)
    parts = _comm.all_gather(g, x.detach())
    index = global_order_varlen(cu, g.size, layout)
    return torch.cat(parts, 0).index_select(0, torch.tensor(index, dtype=torch.int64, device=x.device))


def global_order_varlen(cu_local: Sequence[int], world_size: int, layout: str) -> List[int]:
    """For rows gathered rank after rank (rank 0's local rows, then rank 1's, ...), the index of
    each row of the full packed sequences: full = gathered[index]."""
    per_rank = _plan.chunks_per_rank(layout)
    total_local = cu_local[-1]
    owner = {}
    for rank in range(world_size):
        for slot, c in enumerate(_plan.chunk_ids(layout, rank, world_size)):
            owner[c] = (rank, slot)
    index: List[int] = []
    for start, stop in zip(cu_local[:-1], cu_local[1:]):
        chunk = (stop - start) // per_rank
        for c in range(world_size * per_rank):
            rank, slot = owner[c]
            first = rank * total_local + start + slot * chunk
            index.extend(range(first, first + chunk))
    return index
