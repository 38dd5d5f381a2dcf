"""Ulysses attention (DeepSpeed-Ulysses): an all-to-all turns sequence-sharded q/k/v into
head-sharded tensors over the whole sequence, each rank runs the library's attention on its heads,
and a second all-to-all turns the output back. Exact: every head sees the whole sequence in one
library call. Needs heads_q and heads_k divisible by the group size.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .._errors import ArgumentError
from .._args import window as _window
from ..interface import flash_attn_func, flash_attn_varlen_func
from . import _comm, _plan
from .layout import global_order_varlen
from .ring import _host_cu_seqlens, _ndim, _no_dropout, _require_tensors, _same_sequence, _scale


class _AllToAll(torch.autograd.Function):
    """y[i] = rank i's x[this rank]; its own adjoint, so the backward is the same exchange."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, g: _comm.Group) -> Tensor:
        ctx.g = g
        return _comm.all_to_all(g, x.contiguous())

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None]:
        return _comm.all_to_all(ctx.g, grad.contiguous()), None


class _Resharding:
    """Sequence-sharded (rows, heads, d) <-> head-sharded (all rows, heads / N, d), with rows on
    dim `rows_dim` (1 dense, 0 packed) and the full sequence in global order (`order` maps it to
    the rank-after-rank order the all-to-all delivers; None where they agree)."""

    def __init__(self, g: _comm.Group, rows_dim: int, order: Optional[Tensor]) -> None:
        self.g, self.rows_dim, self.order = g, rows_dim, order
        self.inverse = None if order is None else torch.argsort(order)

    def to_heads(self, x: Tensor) -> Tensor:
        n, d = self.g.size, self.rows_dim
        lead, rows, heads, dim = x.shape[:d], x.shape[d], x.shape[-2], x.shape[-1]
        parts = x.reshape(*lead, rows, n, heads // n, dim).movedim(-3, 0)  # (N, ..., rows, h/N, d)
        got = _AllToAll.apply(parts, self.g)  # got[src]: rank src's rows of this rank's heads
        full = got.movedim(0, d).reshape(*lead, n * rows, heads // n, dim)
        return full if self.order is None else full.index_select(d, self.order)

    def to_rows(self, x: Tensor) -> Tensor:
        n, d = self.g.size, self.rows_dim
        if self.inverse is not None:
            x = x.index_select(d, self.inverse)
        lead, rows, heads, dim = x.shape[:d], x.shape[d] // n, x.shape[-2], x.shape[-1]
        parts = x.reshape(*lead, n, rows, heads, dim).movedim(d, 0)  # (N, ..., rows, h, d)
        got = _AllToAll.apply(parts, self.g)  # got[j]: head group j of this rank's rows
        return got.movedim(0, -3).reshape(*lead, rows, n * heads, dim)

    def lse_to_rows(self, lse: Tensor) -> Tensor:
        """LSE (..., heads / N, all rows) -> (..., heads, this rank's rows)."""
        n = self.g.size
        if self.inverse is not None:
            lse = lse.index_select(-1, self.inverse)
        lead, heads, rows = lse.shape[:-2], lse.shape[-2], lse.shape[-1] // n
        parts = lse.reshape(*lead, heads, n, rows).movedim(-2, 0).contiguous()
        got = _comm.all_to_all(self.g, parts)  # got[j]: head group j
        return got.movedim(0, -3).reshape(*lead, n * heads, rows)


def _divisible_heads(g: _comm.Group, **named: Tensor) -> None:
    for name, x in named.items():
        if x.shape[-2] % g.size:
            raise ArgumentError(f"argument '{name}': Ulysses attention splits heads over the {g.size} ranks; "
                                f"its {x.shape[-2]} heads must be divisible by {g.size}", name)


def _order(g: _comm.Group, cu_local: list, layout: str, device: torch.device) -> Optional[Tensor]:
    if layout == "contiguous" and len(cu_local) == 2:
        return None  # one sequence, contiguous: the all-to-all delivers it in order
    return torch.tensor(global_order_varlen(cu_local, g.size, layout), dtype=torch.int64, device=device)


def ulysses_attn_func(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                      softmax_scale: Optional[float] = None, group: Optional[Any] = None, *,
                      layout: str = "contiguous", softcap: float = 0.0, dropout_p: float = 0.0,
                      deterministic: bool = False, return_lse: bool = False, check_ranks: bool = True) -> Any:
    """Attention over a sequence sharded across ``group`` by all-to-all: arguments, layouts and
    results as ring_flash_attn_func. heads_q and heads_k must be divisible by the group size."""
    _require_tensors(q=q, k=k, v=v)
    _no_dropout(dropout_p)
    _plan.check_layout(layout)
    window = _window(window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _ndim(x, name, 4, "(batch, seqlen, heads, head_dim)")
    _same_sequence(q, k, v, 1)
    g = _comm.Group(group)
    _divisible_heads(g, q=q, k=k, v=v)
    rows = q.shape[1]
    if rows % _plan.chunks_per_rank(layout):
        raise ArgumentError(f"argument 'q': the zigzag layout holds two equal chunks per rank; the local seqlen "
                            f"must be even, got {rows}", "q")
    scale = _scale(softmax_scale, q.shape[-1])
    if check_ranks:
        _comm.check_same_on_every_rank(
            g, q=(tuple(q.shape), str(q.dtype), q.device.type), k=(tuple(k.shape), str(k.dtype)),
            v=(tuple(v.shape), str(v.dtype)), causal=bool(causal), window_size=window, softmax_scale=scale,
            softcap=float(softcap), layout=layout)
    r = _Resharding(g, 1, _order(g, [0, rows], layout, q.device))
    out, lse, _ = flash_attn_func(r.to_heads(q), r.to_heads(k), r.to_heads(v), softmax_scale=scale, causal=causal,
                                  window_size=window, softcap=softcap, deterministic=deterministic,
                                  return_attn_probs=True)
    out = r.to_rows(out)
    return (out, r.lse_to_rows(lse)) if return_lse else out


def ulysses_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_seqlen: int,
                             causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                             softmax_scale: Optional[float] = None, group: Optional[Any] = None, *,
                             layout: str = "contiguous", softcap: float = 0.0, dropout_p: float = 0.0,
                             deterministic: bool = False, return_lse: bool = False, check_ranks: bool = True) -> Any:
    """ulysses_attn_func for packed sequences, with arguments as ring_flash_attn_varlen_func
    (local cu_seqlens, the same on every rank; read on the host once)."""
    _require_tensors(q=q, k=k, v=v, cu_seqlens=cu_seqlens)
    _no_dropout(dropout_p)
    _plan.check_layout(layout)
    window = _window(window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _ndim(x, name, 3, "(total, heads, head_dim)")
    _same_sequence(q, k, v, 0)
    g = _comm.Group(group)
    _divisible_heads(g, q=q, k=k, v=v)
    cu = _host_cu_seqlens(cu_seqlens, int(max_seqlen), q.shape[0], _plan.chunks_per_rank(layout))
    if cu[-1] != q.shape[0]:
        raise ArgumentError(f"argument 'cu_seqlens': Ulysses attention needs every row in a sequence; it ends at "
                            f"{cu[-1]}, q has {q.shape[0]} rows", "cu_seqlens")
    scale = _scale(softmax_scale, q.shape[-1])
    if check_ranks:
        _comm.check_same_on_every_rank(
            g, q=(tuple(q.shape), str(q.dtype), q.device.type), k=(tuple(k.shape), str(k.dtype)),
            v=(tuple(v.shape), str(v.dtype)), cu_seqlens=cu, causal=bool(causal), window_size=window,
            softmax_scale=scale, softcap=float(softcap), layout=layout)
    r = _Resharding(g, 0, _order(g, cu, layout, q.device))
    cu_full = torch.tensor([c * g.size for c in cu], dtype=torch.int32, device=q.device)
    longest = g.size * max((b - a for a, b in zip(cu[:-1], cu[1:])), default=0)
    out, lse, _ = flash_attn_varlen_func(
        r.to_heads(q), r.to_heads(k), r.to_heads(v), cu_full, cu_full, longest, longest,
        softmax_scale=scale, causal=causal, window_size=window, softcap=softcap,
        deterministic=deterministic, return_attn_probs=True)
    out = r.to_rows(out)
    return (out, r.lse_to_rows(lse)) if return_lse else out
