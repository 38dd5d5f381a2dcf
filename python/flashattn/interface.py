"""The ``flash_attn`` interface: same names, argument order, defaults, shapes and return values as
``flash_attn.flash_attn_interface`` (2.7), plus FlashAttention-3's ``flash_attn_combine``.

Every function takes torch tensors (differentiable through torch.autograd, on the CPU backend for
host tensors and the GPU backends for CUDA tensors) or numpy arrays (host, CPU backend, forward
only). Extra arguments beyond flash_attn's are keyword-only and come last.

Differences from flash_attn are listed in the README ("Python package").
"""
from __future__ import annotations

import math
import sys
from typing import Any, Optional, Sequence, Tuple, Union

from ._errors import ArgumentError, UnsupportedError

Array = Any  # a torch.Tensor or a numpy.ndarray

_MAX_HEAD_DIM = 256


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _window(window_size: Sequence[int]) -> Tuple[int, int]:
    if len(window_size) != 2:
        raise ArgumentError(f"argument 'window_size': must be (left, right), got {tuple(window_size)}", "window_size")
    return int(window_size[0]), int(window_size[1])


def _padded_size(head_dim: int) -> int:
    return (head_dim + 7) // 8 * 8


def _pad_head_dim(x: Optional[Array], name: str) -> Optional[Array]:
    """Zero-pads the last dim to a multiple of 8 (the kernels' granule). Zeros change neither q.k
    nor the output columns that are kept, so the caller's result is exact after slicing back."""
    if x is None:
        return None
    head_dim = x.shape[-1]
    if head_dim > _MAX_HEAD_DIM:
        raise ArgumentError(f"argument '{name}': head_dim must be <= {_MAX_HEAD_DIM}, got {head_dim}", name)
    pad = _padded_size(head_dim) - head_dim
    if pad == 0:
        return x
    if _is_torch(x):
        import torch.nn.functional as F

        return F.pad(x, (0, pad))
    import numpy as np

    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])


def _default_scale(softmax_scale: Optional[float], head_dim: int) -> float:
    # Computed here, from the caller's head_dim, because the library sees the padded one.
    return float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(head_dim)


# ---------------------------------------------------------------------------------------------
# The attention core every dense/varlen/packed entry point goes through
# ---------------------------------------------------------------------------------------------
def _attention(q: Array, k: Array, v: Array, *, cu_seqlens_q: Optional[Array] = None,
               cu_seqlens_k: Optional[Array] = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
               seqused_k: Optional[Array] = None, dropout_p: float, softmax_scale: Optional[float], causal: bool,
               window_size: Sequence[int], softcap: float, alibi_slopes: Optional[Array], deterministic: bool,
               return_attn_probs: bool, num_splits: int) -> Any:
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    scale = _default_scale(softmax_scale, head_dim)
    window = _window(window_size)
    qp, kp, vp = _pad_head_dim(q, "q"), _pad_head_dim(k, "k"), _pad_head_dim(v, "v")
    options = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                   max_seqlen_q=int(max_seqlen_q or 0), max_seqlen_k=int(max_seqlen_k or 0), softmax_scale=scale,
                   causal=bool(causal), window_size=window, softcap=float(softcap), alibi_slopes=alibi_slopes,
                   dropout_p=float(dropout_p), num_splits=int(num_splits))
    if _is_torch(q):
        from . import torch_ops

        out, lse, rng_state = torch_ops.attention(qp, kp, vp, deterministic=bool(deterministic), **options)
    else:
        from . import numpy_api

        options.pop("window_size")
        out, lse, rng_state = numpy_api.fwd(qp, kp, vp, window_size=window, **options)
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    if not return_attn_probs:
        return out
    attn_probs = None
    if dropout_p > 0:  # as flash_attn: the probabilities only come back with dropout on
        attn_probs = _dropout_encoded_probs(q, k, v, rng_state, scale=scale, causal=causal, window=window,
                                            softcap=softcap, alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                                            cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                            seqused_k=seqused_k)
    return out, lse, attn_probs


def _to_host_list(x: Optional[Array]) -> Optional[list]:
    if x is None:
        return None
    return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]


def _dropout_encoded_probs(q: Array, k: Array, v: Array, rng_state: Any, *, scale: float, causal: bool,
                           window: Tuple[int, int], softcap: float, alibi_slopes: Optional[Array], dropout_p: float,
                           cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array],
                           seqused_k: Optional[Array]) -> Array:
    """flash_attn's S_dmask: the attention probabilities (batch, heads, seqlen_q, seqlen_k), negated
    where dropout dropped the weight. Recomputed naively (O(seqlen^2) memory; reads cu_seqlens on
    the host): a testing aid, as in flash_attn."""
    from . import reference

    torch_path = _is_torch(q)
    seed, offset = (int(x) for x in (rng_state.tolist() if torch_path else rng_state))
    varlen = cu_seqlens_q is not None
    cu_q, cu_k = _to_host_list(cu_seqlens_q), _to_host_list(cu_seqlens_k)
    used_k = _to_host_list(seqused_k)
    if varlen:
        batch = len(cu_q) - 1
        lens_q = [cu_q[b + 1] - cu_q[b] for b in range(batch)]
        lens_k = [cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b] for b in range(batch)]
        seqlen_q, seqlen_k = max(lens_q, default=0), max(lens_k, default=0)
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    heads = q.shape[-2]
    from .numpy_api import dropout_mask

    keep = dropout_mask(batch, heads, seqlen_q, seqlen_k, dropout_p, seed, offset).astype(bool)
    if torch_path:
        import torch

        keep_t = torch.from_numpy(keep).to(q.device)
        q32, k32, v32 = (t.detach().float() for t in (q, k, v))
        result = torch.zeros((batch, heads, seqlen_q, seqlen_k), dtype=torch.float32, device=q.device)
        sign = torch.where(keep_t, 1.0, -1.0)
    else:
        import numpy as np

        q32, k32, v32 = (np.asarray(t, dtype=np.float32) for t in (q, k, v))
        result = np.zeros((batch, heads, seqlen_q, seqlen_k), dtype=np.float32)
        sign = np.where(keep, 1.0, -1.0).astype(np.float32)
    options = dict(softmax_scale=scale, causal=causal, window_size=window, softcap=softcap)
    for b in range(batch):
        if varlen:
            q_b = q32[cu_q[b]:cu_q[b + 1]][None]
            k_b = k32[cu_k[b]:cu_k[b] + lens_k[b]][None]
            v_b = v32[cu_k[b]:cu_k[b] + lens_k[b]][None]
        else:
            q_b, k_b, v_b = q32[b:b + 1], k32[b:b + 1], v32[b:b + 1]
        slopes = alibi_slopes
        if alibi_slopes is not None and len(alibi_slopes.shape) == 2:
            slopes = alibi_slopes[b]
        _, _, probs = reference.attention_reference(q_b, k_b, v_b, alibi_slopes=slopes, **options)
        sq, sk = probs.shape[-2], probs.shape[-1]
        result[b, :, :sq, :sk] = probs[0] * sign[b, :, :sq, :sk]
    return result.to(q.dtype) if torch_path else result


# ---------------------------------------------------------------------------------------------
# flash_attn's functions
# ---------------------------------------------------------------------------------------------
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, num_splits: int = 1):
    """q (batch, seqlen_q, nheads, d), k/v (batch, seqlen_k, nheads_k, d) with nheads % nheads_k == 0.
    Returns out (batch, seqlen_q, nheads, d), or (out, softmax_lse (batch, nheads, seqlen_q),
    S_dmask) when return_attn_probs (S_dmask is None unless dropout_p > 0)."""
    return _attention(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs, num_splits=num_splits)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              num_splits: int = 1):
    """qkv (batch, seqlen, 3, nheads, d). Returns as flash_attn_func."""
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p=dropout_p, softmax_scale=softmax_scale,
                      causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs, num_splits=num_splits)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             num_splits: int = 1):
    """q (batch, seqlen_q, nheads, d), kv (batch, seqlen_k, 2, nheads_k, d)."""
    return _attention(q, kv[:, :, 0], kv[:, :, 1], dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs, num_splits=num_splits)


def _no_paged_varlen(block_table: Any) -> None:
    if block_table is not None:
        raise UnsupportedError(
            "argument 'block_table': a paged KV cache is supported by flash_attn_with_kvcache, "
            "not yet by the varlen functions", "block_table", "unsupported")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           seqused_k=None, num_splits: int = 1):
    """q (total_q, nheads, d), k/v (total_k, nheads_k, d), cu_seqlens int32 (batch + 1).
    Returns out (total_q, nheads, d), or (out, softmax_lse (nheads, total_q), S_dmask)."""
    _no_paged_varlen(block_table)
    return _attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic, return_attn_probs=return_attn_probs,
                      num_splits=num_splits)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, num_splits: int = 1):
    """qkv (total, 3, nheads, d)."""
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                      max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen, dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic, return_attn_probs=return_attn_probs,
                      num_splits=num_splits)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                                    num_splits: int = 1):
    """q (total_q, nheads, d), kv (total_k, 2, nheads_k, d)."""
    return _attention(q, kv[:, 0], kv[:, 1], cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                      max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic, return_attn_probs=return_attn_probs,
                      num_splits=num_splits)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, Array]] = None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False):
    """Decoding/prefill over a KV cache. q (batch, seqlen_q, nheads, d); k_cache/v_cache
    (batch_cache, seqlen_cache, nheads_k, d), or (num_blocks, page_block_size, nheads_k, d) with
    block_table (batch, max_blocks_per_seq) int32. k/v (batch, seqlen_new, nheads_k, d), when given,
    are rotated (rotary_cos/sin, (seqlen_ro, rotary_dim / 2)) and written into the caches in place
    at cache_seqlens (int or int32 (batch)). Returns out, or (out, softmax_lse) with
    return_softmax_lse. Not differentiable."""
    if cache_leftpad is not None:
        raise UnsupportedError("argument 'cache_leftpad': not supported by flashattn yet", "cache_leftpad",
                               "unsupported")
    torch_path = _is_torch(q)
    if isinstance(cache_seqlens, int):
        if torch_path:
            import torch

            cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
        else:
            import numpy as np

            cache_seqlens = np.full((q.shape[0],), cache_seqlens, dtype=np.int32)
    head_dim, head_dim_v = q.shape[-1], v_cache.shape[-1]
    scale = _default_scale(softmax_scale, head_dim)
    window = _window(window_size)
    # Odd head dims: the library works on zero-padded copies; appended keys are copied back below.
    k_cache_p, v_cache_p = _pad_head_dim(k_cache, "k_cache"), _pad_head_dim(v_cache, "v_cache")
    options = dict(k_new=_pad_head_dim(k, "k"), v_new=_pad_head_dim(v, "v"), cache_seqlens=cache_seqlens,
                   cache_batch_idx=cache_batch_idx, block_table=block_table, rotary_cos=rotary_cos,
                   rotary_sin=rotary_sin, rotary_interleaved=bool(rotary_interleaved), softmax_scale=scale,
                   causal=bool(causal), window_size=window, softcap=float(softcap), alibi_slopes=alibi_slopes,
                   num_splits=int(num_splits))
    qp = _pad_head_dim(q, "q")
    if torch_path:
        from . import torch_ops

        out, lse = torch_ops.attention_kvcache(qp, k_cache_p, v_cache_p, **options)
    else:
        from . import numpy_api

        out, lse = numpy_api.fwd_kvcache(qp, k_cache_p, v_cache_p, **options)
    if k is not None:
        for cache, padded in ((k_cache, k_cache_p), (v_cache, v_cache_p)):
            if padded is not cache:
                cache[...] = padded[..., :cache.shape[-1]]
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    return (out, lse) if return_softmax_lse else out


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FlashAttention-3's combine: merges split-KV partial results by their log-sum-exp.
    out_partial float32 (num_splits, batch, seqlen, nheads, d) or (num_splits, total_q, nheads, d);
    lse_partial float32 (num_splits, batch, seqlen, nheads) or (num_splits, total_q, nheads).
    Returns (out, softmax_lse) with softmax_lse (batch, seqlen, nheads) or (total_q, nheads) (a
    transposed view of the library's (batch, nheads, seqlen) layout, as in FlashAttention-3)."""
    torch_path = _is_torch(out_partial)
    head_dim = out_partial.shape[-1]
    partial = _pad_head_dim(out_partial, "out_partial")
    lse_lib = lse_partial.swapaxes(-1, -2)  # the library's (splits, ..., heads, seqlen)
    if torch_path:
        from . import torch_ops

        lse_lib = lse_lib if lse_lib.stride(-1) == 1 else lse_lib.contiguous()
        dtype = out_dtype if out_dtype is not None else (out.dtype if out is not None else None)
        result, lse = torch_ops.combine_partials(partial, lse_lib, dtype)
    else:
        import numpy as np

        from . import numpy_api

        lse_lib = np.ascontiguousarray(lse_lib)
        dtype = out_dtype if out_dtype is not None else (out.dtype if out is not None else None)
        result, lse = numpy_api.combine(partial, lse_lib, dtype)
    if result.shape[-1] != head_dim:
        result = result[..., :head_dim]
    if out is not None:
        out[...] = result
        result = out
    return result, lse.swapaxes(-1, -2)
