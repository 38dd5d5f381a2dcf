"""Naive attention that materialises the score matrix: the oracle for tests, and what
``return_attn_probs=True`` uses to give the attention probabilities (a debugging aid: it costs
O(seqlen_q x seqlen_k) memory, which the kernels never do).

One implementation serves numpy arrays and torch tensors (and torch autograd flows through it, so
the torch tests take reference gradients from it). It computes in the dtype it is given: pass
float32 (or float64) for an accurate reference, the inputs' low precision to measure how much a
low-precision computation errs by itself.

Semantics are the library's (README "Layout and conventions"): causal and windows aligned to the
bottom-right corner, softcap ``cap*tanh(s*scale/cap)``, ALiBi ``-slope*|i + sk - sq - j|`` added
after softcap, a row that sees no key gives output 0 and LSE -inf, dropout scales kept weights by
``1/(1-p)``.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


class _Ops:
    """The handful of array operations the reference needs, for numpy or torch."""

    def __init__(self, like: Any) -> None:
        self.torch = _is_torch(like)
        if self.torch:
            import torch

            self.xp = torch
        else:
            import numpy

            self.xp = numpy

    def arange(self, n: int, like: Any) -> Any:
        if self.torch:
            return self.xp.arange(n, device=like.device)
        return self.xp.arange(n)

    def repeat_heads(self, x: Any, groups: int, axis: int) -> Any:
        if groups == 1:
            return x
        if self.torch:
            return x.repeat_interleave(groups, dim=axis)
        return self.xp.repeat(x, groups, axis=axis)

    def amax(self, x: Any, axis: int) -> Any:
        if self.torch:
            return x.amax(dim=axis, keepdim=True)
        return x.max(axis=axis, keepdims=True)

    def sum(self, x: Any, axis: int) -> Any:
        if self.torch:
            return x.sum(dim=axis, keepdim=True)
        return x.sum(axis=axis, keepdims=True)

    def full_like(self, x: Any, value: float) -> Any:
        return self.xp.full_like(x, value)

    def full(self, shape: Tuple[int, ...], value: float, like: Any) -> Any:
        if self.torch:
            return self.xp.full(shape, value, dtype=like.dtype, device=like.device)
        return self.xp.full(shape, value, dtype=like.dtype)

    def asarray(self, x: Any, like: Any) -> Any:
        if self.torch:
            return self.xp.as_tensor(x, device=like.device, dtype=like.dtype)
        return self.xp.asarray(x, dtype=like.dtype)

    def concat(self, xs: Sequence[Any], axis: int) -> Any:
        if self.torch:
            return self.xp.cat(list(xs), dim=axis)
        return self.xp.concatenate(list(xs), axis=axis)


def visible_mask(ops: _Ops, seqlen_q: int, seqlen_k: int, causal: bool, window_size: Tuple[int, int],
                 like: Any) -> Any:
    """Boolean (seqlen_q, seqlen_k): query row i sees key j."""
    left, right = window_size
    if causal:
        right = 0
    rows = ops.arange(seqlen_q, like)[:, None]
    keys = ops.arange(seqlen_k, like)[None, :]
    diagonal = rows + (seqlen_k - seqlen_q)  # the key aligned with row i (bottom-right corner)
    visible = keys >= 0
    if right >= 0:
        visible = visible & (keys <= diagonal + right)
    if left >= 0:
        visible = visible & (keys >= diagonal - left)
    return visible


def attention_reference(q: Any, k: Any, v: Any, *, softmax_scale: Optional[float] = None, causal: bool = False,
                        window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi_slopes: Any = None,
                        dropout_p: float = 0.0, dropout_keep: Any = None) -> Tuple[Any, Any, Any]:
    """Dense attention. q (batch, seqlen_q, heads_q, d), k/v (batch, seqlen_k, heads_k, d[_v]);
    alibi_slopes (heads_q) or (batch, heads_q); dropout_keep: booleans or 0/1 of
    (batch, heads_q, seqlen_q, seqlen_k), required when dropout_p > 0.

    Returns (out (batch, seqlen_q, heads_q, d_v), lse (batch, heads_q, seqlen_q),
    probs (batch, heads_q, seqlen_q, seqlen_k): the softmax before dropout)."""
    ops = _Ops(q)
    xp = ops.xp
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_k = k.shape[1], k.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    k = ops.repeat_heads(k, heads_q // heads_k, axis=2)
    v = ops.repeat_heads(v, heads_q // heads_k, axis=2)

    scores = xp.einsum("bqhd,bkhd->bhqk", q, k)
    logits = softcap * xp.tanh(scores * (scale / softcap)) if softcap > 0 else scores * scale
    if alibi_slopes is not None:
        slopes = ops.asarray(alibi_slopes, logits)
        slopes = slopes[None, :] if slopes.ndim == 1 else slopes  # (batch or 1, heads)
        rows = ops.arange(seqlen_q, logits)[:, None]
        keys = ops.arange(seqlen_k, logits)[None, :]
        distance = abs(rows + (seqlen_k - seqlen_q) - keys)
        logits = logits - slopes[:, :, None, None] * ops.asarray(distance, logits)[None, None]
    visible = visible_mask(ops, seqlen_q, seqlen_k, causal, window_size, logits)
    neg_inf = ops.full_like(logits, float("-inf"))
    logits = xp.where(visible[None, None], logits, neg_inf)

    if seqlen_k == 0:  # a max over no keys has no identity (numpy and torch raise): rows see nothing
        row_max = ops.full(tuple(logits.shape[:-1]) + (1,), float("-inf"), logits)
    else:
        row_max = ops.amax(logits, axis=-1)
    finite = xp.isfinite(row_max)
    row_max = xp.where(finite, row_max, ops.full_like(row_max, 0.0))
    weights = xp.exp(logits - row_max)
    denom = ops.sum(weights, axis=-1)
    seen = denom > 0
    # The safe denominator keeps NaN out of gradients of rows that see no key.
    safe_denom = xp.where(seen, denom, ops.full_like(denom, 1.0))
    probs = weights / safe_denom
    lse = xp.where(seen, xp.log(safe_denom) + row_max, ops.full_like(denom, float("-inf")))[..., 0]

    attn = probs
    if dropout_p > 0:
        if dropout_keep is None:
            raise ValueError("attention_reference: dropout_p > 0 needs dropout_keep")
        keep = ops.asarray(dropout_keep, probs)
        attn = probs * keep * (1.0 / (1.0 - dropout_p))
    out = xp.einsum("bhqk,bkhd->bqhd", attn, v)
    return out, lse, probs


def varlen_attention_reference(q: Any, k: Any, v: Any, cu_seqlens_q: Sequence[int], cu_seqlens_k: Sequence[int],
                               *, seqused_k: Optional[Sequence[int]] = None, alibi_slopes: Any = None,
                               dropout_keep: Any = None, **options: Any) -> Tuple[Any, Any]:
    """Packed sequences: q (total_q, heads_q, d), k/v (total_k, heads_k, d[_v]); cu_seqlens as host
    integer sequences. dropout_keep: (batch, heads_q, max_seqlen_q, max_seqlen_k) with each
    sequence's mask in its top-left corner. Returns (out (total_q, heads_q, d_v),
    lse (heads_q, total_q)). Rows past cu_seqlens_q[-1] are left 0 / -inf."""
    ops = _Ops(q)
    cu_q = [int(x) for x in cu_seqlens_q]
    cu_k = [int(x) for x in cu_seqlens_k]
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        q_b = q[cu_q[b]:cu_q[b + 1]][None]
        end_k = cu_k[b + 1] if seqused_k is None else cu_k[b] + int(seqused_k[b])
        k_b = k[cu_k[b]:end_k][None]
        v_b = v[cu_k[b]:end_k][None]
        slopes = alibi_slopes
        if alibi_slopes is not None and len(alibi_slopes.shape) == 2:
            slopes = alibi_slopes[b]
        keep = None
        if dropout_keep is not None:
            keep = dropout_keep[b:b + 1, :, :q_b.shape[1], :k_b.shape[1]]
        out_b, lse_b, _ = attention_reference(q_b, k_b, v_b, alibi_slopes=slopes, dropout_keep=keep, **options)
        outs.append(out_b[0])
        lses.append(lse_b[0])
    total_q = q.shape[0]
    used = cu_q[-1]
    # Rows no sequence owns: output 0, LSE -inf (also what makes an empty batch concatenate).
    rows = total_q - used
    outs.append(ops.full((rows, q.shape[1], v.shape[-1]), 0.0, q))
    lses.append(ops.full((q.shape[1], rows), float("-inf"), q))
    out = ops.concat(outs, axis=0)
    lse = ops.concat(lses, axis=1)
    return out, lse
