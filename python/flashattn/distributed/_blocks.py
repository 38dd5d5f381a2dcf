"""How the calls of one ring step run on the library: forward (merged into running float32
results) and backward (gradients added into float32 accumulators), for dense
(batch, seqlen, heads, d) tensors and for packed sequences (varlen).

The library's torch ops are called directly (flashattn::fwd / flashattn::bwd): the backward of a
block needs the *global* out and LSE of its rows, which the public functions do not accept. The
caller has padded head dims already.

The probes run the library on one row before the ring starts: an argument the library rejects
(dtype, head dim, device) then raises on every rank alike (they agree on shapes and options),
before any transfer is in flight that a peer would wait for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import torch_ops
from . import _plan
from ._merge import merge_


@dataclass(frozen=True)
class Options:
    softmax_scale: float
    softcap: float
    deterministic: bool


def _mask_args(window: Tuple[int, int]) -> Tuple[bool, int, int]:
    """(causal, left, right) for the library: (-1, 0) is its causal mask (the same visible set,
    and the causal kernels)."""
    if window == (_plan.UNBOUNDED, 0):
        return True, _plan.UNBOUNDED, _plan.UNBOUNDED
    return False, window[0], window[1]


_NO_RNG = torch.zeros(2, dtype=torch.int64)
_FULL = (_plan.UNBOUNDED, _plan.UNBOUNDED)


def _fwd(q: Tensor, k: Tensor, v: Tensor, cu_q: Optional[Tensor], cu_k: Optional[Tensor], max_q: int, max_k: int,
         window: Tuple[int, int], o: Options) -> Tuple[Tensor, Tensor]:
    causal, left, right = _mask_args(window)
    out, lse, _ = torch_ops.fwd(q, k, v, cu_q, cu_k, None, max_q, max_k, o.softmax_scale, causal, left, right,
                                o.softcap, None, 0.0, 1)
    return out, lse


def _bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_q: Optional[Tensor],
         cu_k: Optional[Tensor], max_q: int, max_k: int, window: Tuple[int, int],
         o: Options) -> Tuple[Tensor, Tensor, Tensor]:
    causal, left, right = _mask_args(window)
    return torch_ops.bwd(dout, q, k, v, out, lse, cu_q, cu_k, None, max_q, max_k, o.softmax_scale, causal, left,
                         right, o.softcap, None, 0.0, _NO_RNG, o.deterministic)


class DenseBlocks:
    """Blocks of (batch, seqlen, heads, d) tensors: each call runs on sequence-dim views."""

    def __init__(self, plans: List[List[_plan.Block]], options: Options) -> None:
        self.plans = plans
        self.options = options

    def steps(self) -> int:
        return len(self.plans)

    def calls(self, step: int) -> Sequence[_plan.Block]:
        return self.plans[step]

    def probe_forward(self, q: Tensor, k: Tensor, v: Tensor) -> None:
        _fwd(q[:, :1], k[:, :1], v[:, :1], None, None, 0, 0, _FULL, self.options)

    def probe_backward(self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor) -> None:
        _bwd(dout[:, :1], q[:, :1], k[:, :1], v[:, :1], out[:, :1], lse[:, :, :1], None, None, 0, 0, _FULL,
             self.options)

    def forward(self, b: _plan.Block, q: Tensor, k: Tensor, v: Tensor, acc_out: Tensor, acc_lse: Tensor) -> None:
        rows, keys = slice(b.q_start, b.q_stop), slice(b.k_start, b.k_stop)
        out, lse = _fwd(q[:, rows], k[:, keys], v[:, keys], None, None, 0, 0, b.window, self.options)
        merge_(acc_out[:, rows], acc_lse[:, :, rows], out, lse)

    def backward(self, b: _plan.Block, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 dq_acc: Tensor, dk_acc: Tensor, dv_acc: Tensor) -> None:
        rows, keys = slice(b.q_start, b.q_stop), slice(b.k_start, b.k_stop)
        dq, dk, dv = _bwd(dout[:, rows], q[:, rows], k[:, keys], v[:, keys], out[:, rows], lse[:, :, rows],
                          None, None, 0, 0, b.window, self.options)
        dq_acc[:, rows] += dq
        dk_acc[:, keys] += dk
        dv_acc[:, keys] += dv


@dataclass
class _VarlenCallTensors:
    """A VarlenCall on the device: row indices (None where the call takes every row in order),
    cu_seqlens and the longest entries."""

    q_index: Optional[Tensor]
    k_index: Optional[Tensor]
    cu_q: Tensor
    cu_k: Tensor
    max_q: int
    max_k: int
    window: Tuple[int, int]


def _rows(ranges: Sequence[Tuple[int, int]], total: int, device: torch.device) -> Tuple[Optional[Tensor], Tensor, int]:
    lengths = [stop - start for start, stop in ranges]
    cu = torch.tensor([0] + list(_cumsum(lengths)), dtype=torch.int32, device=device)
    in_order = all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and ranges[0][0] == 0 and ranges[-1][1] == total
    index = None if in_order else torch.tensor([r for start, stop in ranges for r in range(start, stop)],
                                               dtype=torch.int64, device=device)
    return index, cu, max(lengths)


def _cumsum(xs: Sequence[int]) -> List[int]:
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


def _take(x: Tensor, index: Optional[Tensor], dim: int = 0) -> Tensor:
    return x if index is None else x.index_select(dim, index)


class VarlenBlocks:
    """Blocks of packed (total, heads, d) tensors: each step's calls gather their rows (unless a
    call takes all rows in order), run one varlen call, and scatter the results back. Index
    tensors are made before the ring starts, so the ring loop never waits for the host."""

    def __init__(self, calls: List[List[_plan.VarlenCall]], total_q: int, total_k: int, device: torch.device,
                 options: Options) -> None:
        self.options = options
        self.plans = [[self._on_device(c, total_q, total_k, device) for c in step] for step in calls]
        self.cu_one = torch.tensor([0, 1], dtype=torch.int32, device=device)  # the probes' one row

    @staticmethod
    def _on_device(c: _plan.VarlenCall, total_q: int, total_k: int, device: torch.device) -> _VarlenCallTensors:
        q_index, cu_q, max_q = _rows(c.q_ranges, total_q, device)
        k_index, cu_k, max_k = _rows(c.k_ranges, total_k, device)
        return _VarlenCallTensors(q_index, k_index, cu_q, cu_k, max_q, max_k, c.window)

    def steps(self) -> int:
        return len(self.plans)

    def calls(self, step: int) -> Sequence[_VarlenCallTensors]:
        return self.plans[step]

    def probe_forward(self, q: Tensor, k: Tensor, v: Tensor) -> None:
        _fwd(q[:1], k[:1], v[:1], self.cu_one, self.cu_one, 1, 1, _FULL, self.options)

    def probe_backward(self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor) -> None:
        _bwd(dout[:1], q[:1], k[:1], v[:1], out[:1], lse[:, :1], self.cu_one, self.cu_one, 1, 1, _FULL, self.options)

    def forward(self, c: _VarlenCallTensors, q: Tensor, k: Tensor, v: Tensor, acc_out: Tensor,
                acc_lse: Tensor) -> None:
        out, lse = _fwd(_take(q, c.q_index), _take(k, c.k_index), _take(v, c.k_index), c.cu_q, c.cu_k, c.max_q,
                        c.max_k, c.window, self.options)
        if c.q_index is None:
            merge_(acc_out, acc_lse, out, lse)
            return
        rows_out, rows_lse = acc_out.index_select(0, c.q_index), acc_lse.index_select(1, c.q_index)
        merge_(rows_out, rows_lse, out, lse)
        acc_out.index_copy_(0, c.q_index, rows_out)
        acc_lse.index_copy_(1, c.q_index, rows_lse)

    def backward(self, c: _VarlenCallTensors, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                 lse: Tensor, dq_acc: Tensor, dk_acc: Tensor, dv_acc: Tensor) -> None:
        dq, dk, dv = _bwd(_take(dout, c.q_index), _take(q, c.q_index), _take(k, c.k_index), _take(v, c.k_index),
                          _take(out, c.q_index), _take(lse, c.q_index, 1), c.cu_q, c.cu_k, c.max_q, c.max_k,
                          c.window, self.options)
        for acc, grad, index in ((dq_acc, dq, c.q_index), (dk_acc, dk, c.k_index), (dv_acc, dv, c.k_index)):
            if index is None:
                acc += grad
            else:
                acc.index_add_(0, index, grad.float())
