"""The library's entry points on numpy arrays (host memory, the CPU backend).

These are the low-level calls (one per C++ entry point) that allocate their outputs with numpy;
``flashattn.flash_attn_func`` and friends route numpy arrays here. Dtypes: float32 and float16
(numpy has no bfloat16 DLPack export). float64 arrays are accepted for convenience and computed in
float32 (the C++ API has no float64): outputs come back as float64, with float32 accuracy.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _ext
from ._errors import raise_for_status

Array = np.ndarray


def _compute_dtype(x: Array) -> Any:
    return np.float32 if x.dtype == np.float64 else x.dtype


def _as_compute(x: Optional[Array]) -> Optional[Array]:
    """float64 -> float32; other dtypes untouched (the library reports what it rejects)."""
    if x is None:
        return None
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float64 else x


def _last_dim_contiguous(x: Optional[Array]) -> Optional[Array]:
    if x is None:
        return None
    x = np.asarray(x)
    if x.ndim and x.strides[-1] != x.itemsize and x.shape[-1] > 1:
        return np.ascontiguousarray(x)
    return x


def _draw_seed() -> int:
    # numpy's global generator, so np.random.seed(...) makes dropout reproducible.
    return int(np.random.randint(0, 2**62, dtype=np.int64))


def fwd(q: Array, k: Array, v: Array, *, cu_seqlens_q: Optional[Array] = None,
        cu_seqlens_k: Optional[Array] = None, seqused_k: Optional[Array] = None, max_seqlen_q: int = 0,
        max_seqlen_k: int = 0, softmax_scale: Optional[float] = None, causal: bool = False,
        window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
        dropout_p: float = 0.0, dropout_seed: Optional[int] = None, dropout_offset: int = 0,
        num_splits: int = 1) -> Tuple[Array, Array, Tuple[int, int]]:
    """Forward attention. Returns (out, softmax_lse, (dropout_seed, dropout_offset)); pass the last
    to ``bwd``. Shapes as in flashattn.h: dense (batch, seqlen, heads, d), varlen (total, heads, d)
    with int32 cu_seqlens; lse (batch, heads_q, seqlen_q) or (heads_q, total_q), float32."""
    out_dtype = q.dtype
    q, k, v = _as_compute(q), _as_compute(k), _as_compute(v)
    varlen = cu_seqlens_q is not None
    out = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    if varlen:
        lse = np.empty((q.shape[1], q.shape[0]), dtype=np.float32)
    else:
        lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if q.ndim == 4 else None
    if dropout_p > 0 and dropout_seed is None:
        dropout_seed = _draw_seed()
    seed = int(dropout_seed or 0)
    raise_for_status(_ext.fwd(
        q, k, v, out, softmax_lse=lse, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        seqused_k=seqused_k, max_seqlen_q=int(max_seqlen_q or 0), max_seqlen_k=int(max_seqlen_k or 0),
        softmax_scale=softmax_scale, causal=bool(causal), window_left=int(window_size[0]),
        window_right=int(window_size[1]), softcap=float(softcap), alibi_slopes=alibi_slopes,
        dropout_p=float(dropout_p), dropout_seed=seed, dropout_offset=int(dropout_offset),
        num_splits=int(num_splits), backend="cpu"))
    return out.astype(out_dtype, copy=False), lse, (seed, int(dropout_offset))


def bwd(dout: Array, q: Array, k: Array, v: Array, out: Array, softmax_lse: Array, *,
        cu_seqlens_q: Optional[Array] = None, cu_seqlens_k: Optional[Array] = None,
        seqused_k: Optional[Array] = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
        softmax_scale: Optional[float] = None, causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
        softcap: float = 0.0, alibi_slopes: Optional[Array] = None, dropout_p: float = 0.0,
        rng_state: Tuple[int, int] = (0, 0), deterministic: bool = False) -> Tuple[Array, Array, Array]:
    """Gradients (dq, dk, dv) of ``fwd`` with the same options; ``rng_state`` is what fwd returned."""
    grad_dtype = q.dtype
    q, k, v, out = _as_compute(q), _as_compute(k), _as_compute(v), _as_compute(out)
    dout = _last_dim_contiguous(_as_compute(dout))
    dq = np.empty(q.shape, dtype=q.dtype)
    dk = np.empty(k.shape, dtype=q.dtype)
    dv = np.empty(v.shape, dtype=q.dtype)
    raise_for_status(_ext.bwd(
        dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        seqused_k=seqused_k, max_seqlen_q=int(max_seqlen_q or 0), max_seqlen_k=int(max_seqlen_k or 0),
        softmax_scale=softmax_scale, causal=bool(causal), window_left=int(window_size[0]),
        window_right=int(window_size[1]), softcap=float(softcap), alibi_slopes=alibi_slopes,
        dropout_p=float(dropout_p), dropout_seed=int(rng_state[0]), dropout_offset=int(rng_state[1]),
        deterministic=bool(deterministic), backend="cpu"))
    return tuple(g.astype(grad_dtype, copy=False) for g in (dq, dk, dv))  # type: ignore[return-value]


def fwd_kvcache(q: Array, k_cache: Array, v_cache: Array, *, k_new: Optional[Array] = None,
                v_new: Optional[Array] = None, cache_seqlens: Optional[Array] = None,
                cache_batch_idx: Optional[Array] = None, block_table: Optional[Array] = None,
                rotary_cos: Optional[Array] = None, rotary_sin: Optional[Array] = None,
                rotary_interleaved: bool = False, softmax_scale: Optional[float] = None, causal: bool = False,
                window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: Optional[Array] = None, num_splits: int = 0) -> Tuple[Array, Array]:
    """Attention of q over a KV cache, appending k_new/v_new into k_cache/v_cache in place (so the
    caches must be writable arrays of q's dtype). Returns (out, softmax_lse)."""
    out = np.empty(q.shape[:-1] + (v_cache.shape[-1],), dtype=q.dtype)
    lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if q.ndim == 4 else None
    raise_for_status(_ext.fwd_kvcache(
        q, k_cache, v_cache, out, k_new=k_new, v_new=v_new, cache_seqlens=cache_seqlens,
        cache_batch_idx=cache_batch_idx, block_table=block_table, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=bool(rotary_interleaved), softmax_lse=lse, softmax_scale=softmax_scale,
        causal=bool(causal), window_left=int(window_size[0]), window_right=int(window_size[1]),
        softcap=float(softcap), alibi_slopes=alibi_slopes, num_splits=int(num_splits), backend="cpu"))
    return out, lse


def combine(out_partial: Array, lse_partial: Array, out_dtype: Any = None) -> Tuple[Array, Array]:
    """Merges split-KV partial results in the library's layout: out_partial float32
    (splits, batch, seqlen, heads, d) or (splits, total, heads, d), lse_partial float32
    (splits, batch, heads, seqlen) or (splits, heads, total). Returns (out, lse) with lse
    (batch, heads, seqlen) or (heads, total)."""
    out_dtype = np.dtype(out_dtype) if out_dtype is not None else out_partial.dtype
    out = np.empty(out_partial.shape[1:], dtype=out_dtype)
    lse = np.empty(lse_partial.shape[1:], dtype=np.float32)
    raise_for_status(_ext.combine(out_partial, lse_partial, out, softmax_lse=lse, backend="cpu"))
    return out, lse


def dropout_mask(batch: int, heads: int, seqlen_q: int, seqlen_k: int, dropout_p: float, dropout_seed: int,
                 dropout_offset: int = 0) -> Array:
    """The keep-mask every backend applies: uint8 (batch, heads, seqlen_q, seqlen_k), 1 = kept."""
    mask = np.empty((batch, heads, seqlen_q, seqlen_k), dtype=np.uint8)
    raise_for_status(_ext.dropout_mask(mask, float(dropout_p), int(dropout_seed), int(dropout_offset)))
    return mask
