"""Ring attention: every rank keeps its queries; keys and values travel around the ring of the
process group, one hop per step, while the rank attends to the block it holds; partial outputs
merge by their log-sum-exp in float32. The backward is a second ring in which dK/dV (float32)
travel with K/V, gathering every rank's contribution, and come home at the end.

Which calls a step makes (masks per block from global positions, layouts) is in _plan; how they
run on the library in _blocks; the transport in _comm.
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple, Union

import torch
from torch import Tensor

from .._errors import ArgumentError, UnsupportedError
from .._args import window as _window
from ..interface import _pad_head_dim
from . import _comm, _plan
from ._blocks import DenseBlocks, Options, VarlenBlocks


_KV_TAG, _DKV_TAG = 0, 1  # K/V and dK/dV hops can be in flight together


class _Packed:
    """K and V as one flat buffer (one message per hop), viewed back as (k, v)."""

    def __init__(self, k: Tensor, v: Tensor) -> None:
        self.k_shape, self.v_shape = k.shape, v.shape
        self.k_numel = k.numel()

    def pack(self, k: Tensor, v: Tensor) -> Tensor:
        return torch.cat([k.reshape(-1), v.reshape(-1)])

    def zeros(self, like: Tensor, dtype: torch.dtype) -> Tensor:
        return torch.zeros(self.k_numel + math.prod(self.v_shape), dtype=dtype, device=like.device)

    def views(self, buf: Tensor) -> Tuple[Tensor, Tensor]:
        return buf[:self.k_numel].view(self.k_shape), buf[self.k_numel:].view(self.v_shape)


class _Ring:
    """One ring attention problem: the group, the calls of every step, and the two ring loops.

    Steps past ``blocks.steps() - 1`` would find nothing to compute on any rank (a window shorter
    than the ring), so the ring stops there; dK/dV then go home in one direct hop."""

    def __init__(self, g: _comm.Group, blocks: Union[DenseBlocks, VarlenBlocks]) -> None:
        self.g = g
        self.blocks = blocks

    def _shift(self, buf: Tensor, tag: int, hops: int = 1) -> Tuple[_comm.Pending, Tensor]:
        """Sends buf hops ranks ahead and receives the same from hops ranks behind (every rank
        does the same): the transfer and the buffer it fills."""
        arriving = torch.empty_like(buf)
        return _comm.exchange(self.g, [buf], self.g.rank + hops, [arriving], self.g.rank - hops, tag), arriving

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        last = self.blocks.steps() - 1
        packed = _Packed(k, v)
        kv = packed.pack(k, v)
        acc_out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=torch.float32, device=q.device)
        lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (q.shape[1], q.shape[0])
        acc_lse = torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)
        if q.shape[-3] > 0:
            self.blocks.probe_forward(q, k, v)
        incoming: Optional[Tuple[_comm.Pending, Tensor]] = None  # the next block, in flight
        for step in range(last + 1):
            if incoming is not None:
                pending, kv = incoming
                pending.wait()
            k_blk, v_blk = packed.views(kv)
            # The next block travels while this one is attended to (on NCCL: from the moment
            # this block arrived and the previous step's work is done, as this step's attention).
            if step < last:
                incoming = self._shift(kv, _KV_TAG)
            for c in self.blocks.calls(step):
                self.blocks.forward(c, q, k_blk, v_blk, acc_out, acc_lse)
        return acc_out.to(q.dtype), acc_lse

    def backward(self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                 lse: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        last = self.blocks.steps() - 1
        packed = _Packed(k, v)
        kv = packed.pack(k, v)
        dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        incoming_kv: Optional[Tuple[_comm.Pending, Tensor]] = None
        incoming_dkv: Optional[Tuple[_comm.Pending, Tensor]] = None  # this block's dK/dV so far
        if q.shape[-3] > 0:
            self.blocks.probe_backward(dout, q, k, v, out, lse)
        for step in range(last + 1):
            if incoming_kv is not None:
                pending, kv = incoming_kv
                pending.wait()
            k_blk, v_blk = packed.views(kv)
            if step < last:
                incoming_kv = self._shift(kv, _KV_TAG)
            dkv = packed.zeros(q, torch.float32)  # this block's dK/dV from this rank's queries
            dk_blk, dv_blk = packed.views(dkv)
            for c in self.blocks.calls(step):
                self.blocks.backward(c, dout, q, k_blk, v_blk, out, lse, dq_acc, dk_blk, dv_blk)
            if incoming_dkv is not None:
                pending, earlier = incoming_dkv
                pending.wait()
                dkv += earlier  # what the ranks before this one added to the same block
            # Onward with the block's K/V; after the last step straight home: the block held at
            # step `last` is rank - last's (one hop ahead when the ring went all the way round).
            hops = 1 if step < last else -last
            if hops == 0:  # a ring of one step: the block is this rank's own
                incoming_dkv = None
                break
            incoming_dkv = self._shift(dkv, _DKV_TAG, hops)
        if incoming_dkv is not None:
            pending, dkv = incoming_dkv
            pending.wait()
        dk, dv = packed.views(dkv)
        return dq_acc.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, ring: _Ring) -> Tuple[Tensor, Tensor]:
        out, lse = ring.forward(q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx: Any, dout: Tensor, _dlse: Any) -> Tuple[Optional[Tensor], ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.ring.backward(dout.contiguous(), q, k, v, out, lse)
        return dq, dk, dv, None


# ---------------------------------------------------------------------------------------------
# Validation shared by the dense and varlen entries
# ---------------------------------------------------------------------------------------------
def _require_tensors(**named: Any) -> None:
    for name, x in named.items():
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"argument '{name}': context parallelism takes torch tensors, got {type(x).__name__}",
                                name)


def _no_dropout(dropout_p: float) -> None:
    if dropout_p != 0:
        raise UnsupportedError(f"argument 'dropout_p': context-parallel attention does not support dropout "
                               f"(got {dropout_p}); pass 0.0", "dropout_p", "unsupported")


def _same_sequence(q: Tensor, k: Tensor, v: Tensor, seq_dim: int) -> None:
    """Ring attention is self-attention over one sharded sequence: K/V rows are the same positions
    as Q rows."""
    for name, x in (("k", k), ("v", v)):
        if x.shape[seq_dim] != q.shape[seq_dim]:
            raise ArgumentError(f"argument '{name}': must hold the same sequence positions as q (dim {seq_dim}: "
                                f"{x.shape[seq_dim]} vs q's {q.shape[seq_dim]})", name)


def _ndim(x: Tensor, name: str, ndim: int, layout: str) -> None:
    if x.dim() != ndim:
        raise ArgumentError(f"argument '{name}': must be {layout}, got {x.dim()} dims", name)


def _scale(softmax_scale: Optional[float], head_dim: int) -> float:
    return float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(head_dim)


def _last_needed_step(g: _comm.Group, needs: Any) -> int:
    """The last step at which any rank has a call (all ranks' plans are computed locally: it is
    integer arithmetic), so every rank runs the same number of steps."""
    return max(max((s for s in range(g.size) if needs(rank, s)), default=0) for rank in range(g.size))


def _run(q: Tensor, k: Tensor, v: Tensor, ring: _Ring, head_dim_v: int, return_lse: bool) -> Any:
    out, lse = _RingAttention.apply(q, k, v, ring)
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------
def ring_flash_attn_func(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                         window_size: Tuple[int, int] = (-1, -1), softmax_scale: Optional[float] = None,
                         group: Optional[Any] = None, *, layout: str = "contiguous", softcap: float = 0.0,
                         dropout_p: float = 0.0, deterministic: bool = False, return_lse: bool = False,
                         check_ranks: bool = True) -> Any:
    """Attention over a sequence sharded across the ranks of ``group`` (torch.distributed).

    q (batch, seqlen_local, heads_q, d), k/v (batch, seqlen_local, heads_k, d[_v]) with
    heads_q % heads_k == 0: this rank's part of the sequence in ``layout`` ("contiguous": rank r
    holds the r-th of N equal pieces; "zigzag": the r-th and (2N-1-r)-th of 2N, which balances
    causal work; see ``shard``). causal / window_size / softcap / softmax_scale mean what they
    mean for flash_attn_func on the whole sequence. Differentiable in q, k, v.

    Returns out (batch, seqlen_local, heads_q, d_v), or (out, softmax_lse) with return_lse
    (float32 (batch, heads_q, seqlen_local), the global LSE of these rows).

    check_ranks (default on) first checks, with one small all_gather_object, that every rank
    passes the same shapes and options: a difference would otherwise hang the ring. It costs a
    host synchronisation per call; turn it off once a training setup is known to be consistent.
    """
    _require_tensors(q=q, k=k, v=v)
    _no_dropout(dropout_p)
    _plan.check_layout(layout)
    window = _window(window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _ndim(x, name, 4, "(batch, seqlen, heads, head_dim)")
    _same_sequence(q, k, v, 1)
    g = _comm.Group(group)
    per_rank = _plan.chunks_per_rank(layout)
    if q.shape[1] % per_rank:
        raise ArgumentError(f"argument 'q': the zigzag layout holds two equal chunks per rank; the local seqlen "
                            f"must be even, got {q.shape[1]}", "q")
    scale = _scale(softmax_scale, q.shape[-1])
    if check_ranks:
        _comm.check_same_on_every_rank(
            g, q=(tuple(q.shape), str(q.dtype), q.device.type), k=(tuple(k.shape), str(k.dtype)),
            v=(tuple(v.shape), str(v.dtype)), causal=bool(causal), window_size=window, softmax_scale=scale,
            softcap=float(softcap), layout=layout)
    chunk_len = q.shape[1] // per_rank
    plans = _plan.ring_plans(layout, g.size, g.rank, chunk_len, bool(causal), window)
    last = _last_needed_step(g, lambda rank, s: bool(_plan.plan_step(
        layout, g.size, rank, (rank - s) % g.size, chunk_len, bool(causal), window)))
    blocks = DenseBlocks(plans[:last + 1], Options(scale, float(softcap), bool(deterministic)))
    qp, kp, vp = _pad_head_dim(q, "q"), _pad_head_dim(k, "k"), _pad_head_dim(v, "v")
    return _run(qp, kp, vp, _Ring(g, blocks), v.shape[-1], return_lse)


def _host_cu_seqlens(cu_seqlens: Tensor, max_seqlen: int, total: int, per_rank: int) -> List[int]:
    """cu_seqlens on the host (one device synchronisation, before the ring starts), checked."""
    if cu_seqlens.dim() != 1 or cu_seqlens.dtype != torch.int32 or cu_seqlens.numel() < 1:
        raise ArgumentError(f"argument 'cu_seqlens': must be int32 of shape (batch + 1), got {cu_seqlens.dtype} "
                            f"{tuple(cu_seqlens.shape)}", "cu_seqlens")
    cu = [int(x) for x in cu_seqlens.tolist()]
    lengths = [b - a for a, b in zip(cu[:-1], cu[1:])]
    if cu[0] != 0 or any(n < 0 for n in lengths) or cu[-1] > total:
        raise ArgumentError(f"argument 'cu_seqlens': must start at 0, not decrease and end at most at q's {total} "
                            f"rows, got {cu}", "cu_seqlens")
    if any(n % per_rank for n in lengths):
        raise ArgumentError(f"argument 'cu_seqlens': the zigzag layout holds two equal chunks of every sequence "
                            f"per rank; every local length must be even, got {lengths}", "cu_seqlens")
    if lengths and max(lengths) > max_seqlen:
        raise ArgumentError(f"argument 'max_seqlen': must be at least the longest local sequence, "
                            f"{max(lengths)}, got {max_seqlen}", "max_seqlen")
    return cu


def ring_flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_seqlen: int,
                                causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                softmax_scale: Optional[float] = None, group: Optional[Any] = None, *,
                                layout: str = "contiguous", softcap: float = 0.0, dropout_p: float = 0.0,
                                deterministic: bool = False, return_lse: bool = False,
                                check_ranks: bool = True) -> Any:
    """ring_flash_attn_func for packed sequences: q (total_local, heads_q, d), k/v
    (total_local, heads_k, d[_v]), cu_seqlens int32 (batch + 1) the *local* offsets (the same on
    every rank): every sequence is sharded in ``layout`` on its own, so each rank holds 1/N of
    every sequence (see ``shard_varlen``); max_seqlen the longest local sequence.

    Returns out (total_local, heads_q, d_v), or (out, softmax_lse float32 (heads_q, total_local)).
    cu_seqlens is read on the host once, before the ring starts. Sequences may differ in length;
    a window makes the per-block masks depend on each length, and blocks with the same mask share
    one varlen call."""
    _require_tensors(q=q, k=k, v=v, cu_seqlens=cu_seqlens)
    _no_dropout(dropout_p)
    _plan.check_layout(layout)
    window = _window(window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _ndim(x, name, 3, "(total, heads, head_dim)")
    _same_sequence(q, k, v, 0)
    g = _comm.Group(group)
    per_rank = _plan.chunks_per_rank(layout)
    cu = _host_cu_seqlens(cu_seqlens, int(max_seqlen), q.shape[0], per_rank)
    scale = _scale(softmax_scale, q.shape[-1])
    if check_ranks:
        _comm.check_same_on_every_rank(
            g, q=(tuple(q.shape), str(q.dtype), q.device.type), k=(tuple(k.shape), str(k.dtype)),
            v=(tuple(v.shape), str(v.dtype)), cu_seqlens=cu, causal=bool(causal), window_size=window,
            softmax_scale=scale, softcap=float(softcap), layout=layout)

    def calls(rank: int, step: int) -> List[_plan.VarlenCall]:
        return _plan.varlen_step_calls(layout, g.size, rank, (rank - step) % g.size, cu, bool(causal), window)

    chunk_lens = sorted({(b - a) // per_rank for a, b in zip(cu[:-1], cu[1:])})
    last = _last_needed_step(g, lambda rank, s: any(_plan.plan_step(
        layout, g.size, rank, (rank - s) % g.size, c, bool(causal), window) for c in chunk_lens))
    steps = [calls(g.rank, s) for s in range(last + 1)]
    blocks = VarlenBlocks(steps, q.shape[0], k.shape[0], q.device, Options(scale, float(softcap), bool(deterministic)))
    qp, kp, vp = _pad_head_dim(q, "q"), _pad_head_dim(k, "k"), _pad_head_dim(v, "v")
    return _run(qp, kp, vp, _Ring(g, blocks), v.shape[-1], return_lse)
