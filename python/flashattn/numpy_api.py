"""The library's entry points on numpy arrays (host memory, the CPU backend).

These are the low-level calls (one per C++ entry point) that allocate their outputs with numpy;
``flashattn.flash_attn_func`` and friends route numpy arrays here. Dtypes: float32 and float16
(numpy has no bfloat16 DLPack export). float64 arrays are accepted for convenience and computed in
float32 (the C++ API has no float64): outputs come back as float64, with float32 accuracy.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _args, _ext
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
    """A copy when the last dim is strided, as flash_attn makes its inputs contiguous."""
    return _args.last_dim_contiguous(x)


def _check_arrays(optional: bool = False, **arrays: Any) -> None:
    """Each argument must be a numpy array (or None when optional): not a list, not a torch tensor."""
    for name, x in arrays.items():
        _args.tensor(x, name, "numpy", optional=optional)


def _seqlen(value: Any, name: str) -> int:
    return _args.optional_integer(value, name, 0, _args.INT32_MAX, "must be >= 0 (0 derives it from cu_seqlens)")


def _rng_state(rng_state: Any) -> Tuple[int, int]:
    """(seed, offset) as fwd returned it."""
    try:
        seed, offset = (int(x) for x in rng_state)
    except (TypeError, ValueError):
        raise _args.type_error("rng_state", "must be the (seed, offset) pair fwd returned", rng_state) from None
    return (_args.integer(seed, "rng_state", 0, _args.UINT64_MAX),
            _args.integer(offset, "rng_state", 0, _args.UINT64_MAX))


def _draw_seed() -> int:
    # numpy's global generator, so np.random.seed(...) makes dropout reproducible.
    return int(np.random.randint(0, 2**62, dtype=np.int64))


def fwd(q: Array, k: Array, v: Array, *, cu_seqlens_q: Optional[Array] = None,
        cu_seqlens_k: Optional[Array] = None, seqused_k: Optional[Array] = None, max_seqlen_q: int = 0,
        max_seqlen_k: int = 0, softmax_scale: Optional[float] = None, causal: bool = False,
        window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
        dropout_p: float = 0.0, dropout_seed: Optional[int] = None, dropout_offset: int = 0,
        num_splits: int = 1, block_table: Optional[Array] = None) -> Tuple[Array, Array, Tuple[int, int]]:
    """Forward attention on the CPU backend, the C++ API's fwd.

    Arguments:
        q: dense (batch, seqlen_q, heads_q, d) or varlen (total_q, heads_q, d).
        k, v: (batch, seqlen_k, heads_k, d[_v]) or (total_k, heads_k, d[_v]), q's dtype.
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,): the varlen layout when given.
        seqused_k: int32 (batch,), optional: keys used per sequence.
        max_seqlen_q, max_seqlen_k: int, upper bounds of the sequence lengths (0: derived).
        softmax_scale: float (None: 1 / sqrt(d)). causal: bool, bottom-right aligned.
        window_size: (left, right), -1 = unbounded. softcap: float, 0 = off.
        alibi_slopes: float32 (heads_q,) or (batch, heads_q), optional.
        dropout_p: float in [0, 1); dropout_seed (None: drawn from numpy's global generator) and
            dropout_offset: the Philox stream of the mask.
        num_splits: int, split-KV chunks (1 = off, 0 = the library chooses).
        block_table: int32 (batch, max_blocks_per_seq), varlen only: k and v are paged
            (num_blocks, page_size, heads_k, d[_v]); sequence b's keys are found through row b.

    Returns:
        (out, softmax_lse, (dropout_seed, dropout_offset)); pass the last to ``bwd``. lse is
        float32 (batch, heads_q, seqlen_q) or (heads_q, total_q); varlen rows past
        cu_seqlens_q[-1] are 0 / -inf.
    """
    _check_arrays(q=q, k=k, v=v)
    _check_arrays(optional=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                  alibi_slopes=alibi_slopes, block_table=block_table)
    out_dtype = q.dtype
    q, k, v = (_last_dim_contiguous(_as_compute(x)) for x in (q, k, v))
    varlen = cu_seqlens_q is not None
    window_left, window_right = _args.window(window_size)
    if varlen:
        # Rows past cu_seqlens_q[-1] belong to no sequence: the library leaves them alone, and they
        # read as a row that sees no key (output 0, LSE -inf) rather than as uninitialised memory.
        out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        lse = np.full((q.shape[1], q.shape[0]), -np.inf, dtype=np.float32) if q.ndim == 3 else None
    else:
        out = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if q.ndim == 4 else None
    dropout_p = _args.real(dropout_p, "dropout_p")
    if dropout_p > 0 and dropout_seed is None:
        dropout_seed = _draw_seed()
    seed = _args.optional_integer(dropout_seed, "dropout_seed", 0, _args.UINT64_MAX)
    offset = _args.integer(dropout_offset, "dropout_offset", 0, _args.UINT64_MAX)
    raise_for_status(_ext.fwd(
        q, k, v, out, softmax_lse=lse, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        seqused_k=seqused_k, max_seqlen_q=_seqlen(max_seqlen_q, "max_seqlen_q"),
        max_seqlen_k=_seqlen(max_seqlen_k, "max_seqlen_k"),
        softmax_scale=_args.optional_real(softmax_scale, "softmax_scale"), causal=_args.flag(causal, "causal"),
        window_left=window_left, window_right=window_right, softcap=_args.real(softcap, "softcap"),
        alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=seed, dropout_offset=offset,
        num_splits=_args.integer(num_splits, "num_splits"), block_table=block_table, backend="cpu"))
    return out.astype(out_dtype, copy=False), lse, (seed, offset)


def bwd(dout: Array, q: Array, k: Array, v: Array, out: Array, softmax_lse: Array, *,
        cu_seqlens_q: Optional[Array] = None, cu_seqlens_k: Optional[Array] = None,
        seqused_k: Optional[Array] = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
        softmax_scale: Optional[float] = None, causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
        softcap: float = 0.0, alibi_slopes: Optional[Array] = None, dropout_p: float = 0.0,
        rng_state: Tuple[int, int] = (0, 0), deterministic: bool = False) -> Tuple[Array, Array, Array]:
    """Gradients (dq, dk, dv) of ``fwd``, in q's dtype.

    Arguments:
        dout: the gradient of out. q, k, v: fwd's inputs. out, softmax_lse: fwd's outputs.
        cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
        window_size, softcap, alibi_slopes, dropout_p: fwd's options, unchanged.
        rng_state: the (dropout_seed, dropout_offset) fwd returned.
        deterministic: bool, bitwise reproducible gradients.
    """
    _check_arrays(dout=dout, q=q, k=k, v=v, out=out, softmax_lse=softmax_lse)
    _check_arrays(optional=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                  alibi_slopes=alibi_slopes)
    grad_dtype = q.dtype
    q, k, v, out, dout = (_last_dim_contiguous(_as_compute(x)) for x in (q, k, v, out, dout))
    window_left, window_right = _args.window(window_size)
    seed, offset = _rng_state(rng_state)
    # Varlen: rows past the last cu_seqlens entry take part in nothing, so their gradient is 0.
    alloc = np.zeros if cu_seqlens_q is not None else np.empty
    dq = alloc(q.shape, dtype=q.dtype)
    dk = alloc(k.shape, dtype=q.dtype)
    dv = alloc(v.shape, dtype=q.dtype)
    raise_for_status(_ext.bwd(
        dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        seqused_k=seqused_k, max_seqlen_q=_seqlen(max_seqlen_q, "max_seqlen_q"),
        max_seqlen_k=_seqlen(max_seqlen_k, "max_seqlen_k"),
        softmax_scale=_args.optional_real(softmax_scale, "softmax_scale"), causal=_args.flag(causal, "causal"),
        window_left=window_left, window_right=window_right, softcap=_args.real(softcap, "softcap"),
        alibi_slopes=alibi_slopes, dropout_p=_args.real(dropout_p, "dropout_p"), dropout_seed=seed,
        dropout_offset=offset, deterministic=_args.flag(deterministic, "deterministic"), backend="cpu"))
    return tuple(g.astype(grad_dtype, copy=False) for g in (dq, dk, dv))  # type: ignore[return-value]


def fwd_kvcache(q: Array, k_cache: Array, v_cache: Array, *, k_new: Optional[Array] = None,
                v_new: Optional[Array] = None, cache_seqlens: Optional[Array] = None,
                cache_batch_idx: Optional[Array] = None, cache_leftpad: Optional[Array] = None,
                block_table: Optional[Array] = None, rotary_cos: Optional[Array] = None,
                rotary_sin: Optional[Array] = None,
                rotary_interleaved: bool = False, softmax_scale: Optional[float] = None, causal: bool = False,
                window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: Optional[Array] = None, num_splits: int = 0, cu_seqlens_q: Optional[Array] = None,
                max_seqlen_q: int = 0) -> Tuple[Array, Array]:
    """Attention of q over a KV cache, appending k_new/v_new into k_cache/v_cache in place (so the
    caches must then be writable arrays of q's dtype; without k_new/v_new they are only read, and
    read-only arrays are accepted).

    Arguments:
        q: (batch, seqlen_q, heads_q, d), or (total_q, heads_q, d) with cu_seqlens_q. k_cache, v_cache: (batch_cache, seqlen_cache, heads_k,
            d[_v]) or paged (num_blocks, page_size, heads_k, d[_v]).
        k_new, v_new: (batch, seqlen_new, heads_k, d[_v]), optional, appended at cache_seqlens.
        cache_seqlens: int32 (batch,), tokens already in each cache row (None: all of them).
        cache_batch_idx: int32 (batch,), the cache row of each batch entry.
        cache_leftpad: int32 (batch,), the cache position where each sequence starts (left padding).
        block_table: int32 (batch, max_blocks), the pages of a paged cache.
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), optional; rotary_interleaved: bool.
        softmax_scale, causal, window_size, softcap, alibi_slopes: as fwd.
        num_splits: int, split-KV chunks (0 = the library chooses).
        cu_seqlens_q: int32 (batch + 1,), optional: varlen queries; max_seqlen_q their longest
            sequence (0: derived).

    Returns:
        (out (batch, seqlen_q, heads_q, d_v), softmax_lse float32 (batch, heads_q, seqlen_q)); varlen
        out (total_q, heads_q, d_v) and softmax_lse (heads_q, total_q).
    """
    _check_arrays(q=q, k_cache=k_cache, v_cache=v_cache)
    _check_arrays(optional=True, k_new=k_new, v_new=v_new, cache_seqlens=cache_seqlens,
                  cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, block_table=block_table,
                  rotary_cos=rotary_cos, rotary_sin=rotary_sin, alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q)
    if k_new is not None or v_new is not None:
        for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not cache.flags.writeable:
                raise _args.value_error(name, "must be writable when k/v are appended into it", "a read-only array")
    q, k_new, v_new = (_last_dim_contiguous(x) for x in (q, k_new, v_new))
    window_left, window_right = _args.window(window_size)
    if cu_seqlens_q is not None:
        # Rows past cu_seqlens_q[-1] belong to no sequence: 0 / -inf, as in fwd.
        out = np.zeros(q.shape[:-1] + (v_cache.shape[-1],), dtype=q.dtype)
        lse = np.full((q.shape[1], q.shape[0]), -np.inf, dtype=np.float32) if q.ndim == 3 else None
    else:
        out = np.empty(q.shape[:-1] + (v_cache.shape[-1],), dtype=q.dtype)
        lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if q.ndim == 4 else None
    raise_for_status(_ext.fwd_kvcache(
        q, k_cache, v_cache, out, k_new=k_new, v_new=v_new, cache_seqlens=cache_seqlens,
        cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, block_table=block_table,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=_args.flag(rotary_interleaved, "rotary_interleaved"), softmax_lse=lse,
        softmax_scale=_args.optional_real(softmax_scale, "softmax_scale"), causal=_args.flag(causal, "causal"),
        window_left=window_left, window_right=window_right, softcap=_args.real(softcap, "softcap"),
        alibi_slopes=alibi_slopes, num_splits=_args.integer(num_splits, "num_splits"), cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=_seqlen(max_seqlen_q, "max_seqlen_q"), backend="cpu"))
    return out, lse


def combine(out_partial: Array, lse_partial: Array, out_dtype: Any = None) -> Tuple[Array, Array]:
    """Merges split-KV partial results in the library's layout: out_partial float32
    (splits, batch, seqlen, heads, d) or (splits, total, heads, d), lse_partial float32
    (splits, batch, heads, seqlen) or (splits, heads, total). Returns (out, lse) with lse
    (batch, heads, seqlen) or (heads, total). out_dtype: the output's dtype (default
    out_partial's)."""
    _check_arrays(out_partial=out_partial, lse_partial=lse_partial)
    try:
        out_dtype = np.dtype(out_dtype) if out_dtype is not None else out_partial.dtype
    except TypeError:
        raise _args.type_error("out_dtype", "must be a numpy dtype or None", out_dtype) from None
    out = np.empty(out_partial.shape[1:], dtype=out_dtype)
    lse = np.empty(lse_partial.shape[1:], dtype=np.float32)
    raise_for_status(_ext.combine(out_partial, lse_partial, out, softmax_lse=lse, backend="cpu"))
    return out, lse


def dropout_mask(batch: int, heads: int, seqlen_q: int, seqlen_k: int, dropout_p: float, dropout_seed: int,
                 dropout_offset: int = 0) -> Array:
    """The keep-mask every backend applies for dropout_p with the Philox stream (dropout_seed,
    dropout_offset): uint8 (batch, heads, seqlen_q, seqlen_k), 1 = kept."""
    shape = tuple(_args.integer(n, name, 0) for n, name in
                  ((batch, "batch"), (heads, "heads"), (seqlen_q, "seqlen_q"), (seqlen_k, "seqlen_k")))
    mask = np.empty(shape, dtype=np.uint8)
    raise_for_status(_ext.dropout_mask(mask, _args.real(dropout_p, "dropout_p"),
                                       _args.integer(dropout_seed, "dropout_seed", 0, _args.UINT64_MAX),
                                       _args.integer(dropout_offset, "dropout_offset", 0, _args.UINT64_MAX)))
    return mask
