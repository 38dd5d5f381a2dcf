"""FlashAttention-3's Python interface (``flash_attn_interface``, the module FA3's hopper/ build
installs, also reachable as ``flash_attn_3.flash_attn_interface``): the same names, argument order,
defaults and return values, over this library. ``flashattn.compat.install()`` makes
``import flash_attn_interface`` resolve here.

Return conventions, as FA3's interface (hopper/flash_attn_interface.py):

* ``flash_attn_func`` / ``flash_attn_varlen_func`` / ``flash_attn_qkvpacked_func``: ``out``, or
  ``(out, softmax_lse)`` with ``return_attn_probs=True`` (no S_dmask: FA3 has no dropout).
* ``flash_attn_with_kvcache``: ``out``, or ``(out, softmax_lse, out_accum, softmax_lse_accum)`` with
  ``return_softmax_lse=True``; the last two are FA3's split-KV partials, returned empty here
  (the library combines its splits itself).
* ``flash_attn_combine``: ``(out, softmax_lse)``.
* ``get_scheduler_metadata``: an empty int32 tensor; flash_attn_with_kvcache accepts it (and FA3's
  own) and ignores it: scheduling is a hint this library does not need.

Layouts and masks as in flashattn.interface: dense ``(batch, seqlen, nheads, headdim)``, varlen
``(total_tokens, nheads, headdim)`` with int32 ``cu_seqlens``; causal aligned to the bottom-right
corner; ``window_size=(left, right)`` with -1 = unbounded; softmax_lse float32
``(batch, nheads, seqlen_q)`` (varlen ``(nheads, total_q)``).

FP8: q, k, v of dtype ``torch.float8_e4m3fn`` with optional float32 ``(batch, nheads_k)``
``q_descale``/``k_descale``/``v_descale`` (the attention of ``q * q_descale`` etc.; query head ``h``
uses ``q_descale[:, h // (nheads // nheads_k)]``) give a bfloat16 ``out``, forward only (inputs that
require grad raise ``UnsupportedError``). ``flashattn.quantize_fp8`` makes such inputs. CUDA fp8
tensors run on the FA3 fp8 forward of an sm90 GPU (H100, H200); CPU tensors on the CPU backend,
which alone also takes an fp8 KV cache.

Arguments whose feature this library has not built raise ``flashattn.UnsupportedError`` (a
``ValueError`` and ``NotImplementedError``, also a ``RuntimeError``) naming the argument: ``qv``,
``attention_chunk != 0``, ``seqused_q``, ``rotary_seqlens``, and in flash_attn_with_kvcache
``cu_seqlens_k_new`` (varlen new keys).
Arguments that only tune speed are checked and
accepted: ``pack_gqa``, ``sm_margin``, ``scheduler_metadata``, and ``max_seqlen_q`` in
flash_attn_with_kvcache without ``cu_seqlens_q`` (FA3 ignores it there too).
"""
from __future__ import annotations

from typing import Any, Optional, Union

from . import _args
from ._errors import UnsupportedError
from .interface import Array, Window, _Call, _kvcache, _run, flash_attn_combine

__version__ = "3.0.0"


def _unsupported(value: Any, name: str, what: str) -> None:
    if value is not None:
        raise UnsupportedError(f"argument '{name}': {what} is not supported by flashattn yet", name, "unsupported")


def _no_qv_or_chunks(qv: Any, attention_chunk: Any) -> None:
    _unsupported(qv, "qv", "the extra query/value product qv (MLA-style attention)")
    if _args.integer(attention_chunk, "attention_chunk", 0, rule="must be >= 0 (0 = off)") != 0:
        raise UnsupportedError("argument 'attention_chunk': chunked attention (attention_chunk > 0) is not "
                               "supported by flashattn yet", "attention_chunk", "unsupported")


def _hints(pack_gqa: Any, sm_margin: Any) -> None:
    """Speed hints: checked, then ignored (they change how FA3 schedules work, not the result)."""
    if pack_gqa is not None:
        _args.flag(pack_gqa, "pack_gqa")
    _args.integer(sm_margin, "sm_margin", 0, rule="must be >= 0 (multiprocessors left free)")


def _result(out: Array, lse: Array, return_attn_probs: Any) -> Any:
    return (out, lse) if _args.flag(return_attn_probs, "return_attn_probs") else out


_ARGS = """
        softmax_scale: float. Scaling of Q @ K^T before the softmax; default 1 / sqrt(headdim).
        causal: bool. Causal mask aligned to the bottom-right corner of the score matrix: query i
            sees key j iff j <= i + seqlen_k - seqlen_q (rows that see no key give output 0).
        qv: not supported yet (UnsupportedError when given).
        q_descale, k_descale, v_descale: float32 (batch, nheads_k), optional, for float8_e4m3fn q, k,
            v only: the attention is that of q * q_descale, k * k_descale, v * v_descale (query
            head h takes q_descale[:, h // (nheads // nheads_k)]); absent = 1. fp8 gives a bfloat16
            out and has no backward (see flashattn.quantize_fp8).
        window_size: (left, right). Query i sees keys j in [i + seqlen_k - seqlen_q - left,
            i + seqlen_k - seqlen_q + right]; -1 = unbounded on that side.
        attention_chunk: int; only 0 (off) is supported.
        softcap: float >= 0. When > 0, each logit s becomes softcap * tanh(s / softcap).
        num_splits: int. Split-KV chunks; 1 = no split, 0 = the library chooses. Same result.
        pack_gqa: bool or None. A speed hint (FA3 packs GQA heads into one tile); accepted, ignored.
        deterministic: bool. Bitwise reproducible backward.
        sm_margin: int >= 0. A speed hint (multiprocessors to leave free); accepted, ignored.
        return_attn_probs: bool. Also return softmax_lse (FA3 returns no probabilities).

    Returns:
        out, or (out, softmax_lse float32 {lse}) with return_attn_probs. Differentiable in q, k, v.
"""


def flash_attn_func(q: Array, k: Array, v: Array, softmax_scale: Optional[float] = None, causal: bool = False,
                    qv: Optional[Array] = None, q_descale: Optional[Array] = None, k_descale: Optional[Array] = None,
                    v_descale: Optional[Array] = None, window_size: Window = (-1, -1), attention_chunk: int = 0,
                    softcap: float = 0.0, num_splits: int = 1, pack_gqa: Optional[bool] = None,
                    deterministic: bool = False, sm_margin: int = 0, return_attn_probs: bool = False) -> Any:
    _no_qv_or_chunks(qv, attention_chunk)
    _hints(pack_gqa, sm_margin)
    call = _Call(q, k, v, varlen=False, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                 softcap=softcap, deterministic=deterministic, num_splits=num_splits, q_descale=q_descale,
                 k_descale=k_descale, v_descale=v_descale)
    out, lse, _ = _run(call)
    return _result(out, lse, return_attn_probs)


flash_attn_func.__doc__ = """FlashAttention-3's flash_attn_func: exact attention with GQA/MQA.

    Arguments:
        q: (batch, seqlen_q, nheads, headdim), float16/bfloat16 (float32 on the CPU backend), or
            float8_e4m3fn with descales (CPU backend for now).
        k: (batch, seqlen_k, nheads_k, headdim), nheads % nheads_k == 0.
        v: (batch, seqlen_k, nheads_k, headdim_v).""" + _ARGS.format(lse="(batch, nheads, seqlen_q)")


def flash_attn_varlen_func(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                           max_seqlen_q: Optional[int], max_seqlen_k: Optional[int],
                           seqused_q: Optional[Array] = None, seqused_k: Optional[Array] = None,
                           softmax_scale: Optional[float] = None, causal: bool = False, qv: Optional[Array] = None,
                           q_descale: Optional[Array] = None, k_descale: Optional[Array] = None,
                           v_descale: Optional[Array] = None, window_size: Window = (-1, -1),
                           attention_chunk: int = 0, softcap: float = 0.0, num_splits: int = 1,
                           pack_gqa: Optional[bool] = None, deterministic: bool = False, sm_margin: int = 0,
                           return_attn_probs: bool = False) -> Any:
    _unsupported(seqused_q, "seqused_q", "a per-sequence count of used queries")
    _no_qv_or_chunks(qv, attention_chunk)
    _hints(pack_gqa, sm_margin)
    call = _Call(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                 softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                 deterministic=deterministic, num_splits=num_splits, q_descale=q_descale, k_descale=k_descale,
                 v_descale=v_descale)
    out, lse, _ = _run(call)
    return _result(out, lse, return_attn_probs)


flash_attn_varlen_func.__doc__ = """FlashAttention-3's flash_attn_varlen_func: attention over packed
    sequences (each attends only to its own keys; masks apply per sequence).

    Arguments:
        q: (total_q, nheads, headdim); k: (total_k, nheads_k, headdim); v: (total_k, nheads_k, headdim_v).
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,), offsets of the sequences. Rows of q past
            cu_seqlens_q[-1] get output 0 and softmax_lse -inf.
        max_seqlen_q, max_seqlen_k: int, the longest sequences (None or 0: derived from host
            cu_seqlens).
        seqused_q: not supported yet (UnsupportedError when given).
        seqused_k: int32 (batch,), optional: sequence b uses only its first seqused_k[b] keys.""" + _ARGS.format(
    lse="(nheads, total_q)")


def flash_attn_qkvpacked_func(qkv: Array, softmax_scale: Optional[float] = None, causal: bool = False,
                              q_descale: Optional[Array] = None, k_descale: Optional[Array] = None,
                              v_descale: Optional[Array] = None, window_size: Window = (-1, -1),
                              attention_chunk: int = 0, softcap: float = 0.0, deterministic: bool = False,
                              num_heads_q: Optional[int] = None, sm_margin: int = 0,
                              return_attn_probs: bool = False) -> Any:
    """FlashAttention-3's flash_attn_qkvpacked_func: self-attention on q, k, v stacked in one tensor.

    Arguments:
        qkv: (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, num_heads_q + 2 * num_heads_k,
            headdim) with num_heads_q given (GQA/MQA).
        softmax_scale, causal, window_size, softcap, deterministic: as flash_attn_func.
        q_descale, k_descale, v_descale: as flash_attn_func (fp8 qkv); attention_chunk: only 0.
        num_heads_q: int, the query heads of a 4-dim qkv.
        sm_margin: a speed hint; accepted, ignored.
        return_attn_probs: bool, also return softmax_lse.

    Returns:
        out (batch, seqlen, nheads, headdim), or (out, softmax_lse) with return_attn_probs."""
    _no_qv_or_chunks(None, attention_chunk)
    _hints(None, sm_margin)
    _args.tensor(qkv, "qkv")
    if qkv.ndim == 5:
        _args.dim(qkv, "qkv", 2, 3, "the number of packed tensors")
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        _args.ndim(qkv, "qkv", 4, "(batch, seqlen, num_heads_q + 2 * num_heads_k, headdim) "
                                  "(or 5: (batch, seqlen, 3, nheads, headdim))")
        if num_heads_q is None:
            raise _args.type_error("num_heads_q", "must be given for a 4-dim qkv", None)
        heads_q = _args.integer(num_heads_q, "num_heads_q", 1)
        heads_k, rest = divmod(qkv.shape[2] - heads_q, 2)
        if rest or heads_k < 1:
            raise _args.value_error("num_heads_q", f"must leave an even, positive number of the {qkv.shape[2]} "
                                    "heads for k and v", str(heads_q))
        q, k, v = qkv[:, :, :heads_q], qkv[:, :, heads_q:heads_q + heads_k], qkv[:, :, heads_q + heads_k:]
    call = _Call(q, k, v, varlen=False, names=("qkv", "qkv", "qkv"), softmax_scale=softmax_scale, causal=causal,
                 window_size=window_size, softcap=softcap, deterministic=deterministic, q_descale=q_descale,
                 k_descale=k_descale, v_descale=v_descale)
    out, lse, _ = _run(call)
    return _result(out, lse, return_attn_probs)


def _empty(like: Array, dtype_name: str = "float32") -> Array:
    if _args.array_kind(like) == "torch":
        import torch

        return torch.empty((0,), dtype=getattr(torch, dtype_name), device=like.device)
    import numpy as np

    return np.empty((0,), dtype=dtype_name)


def flash_attn_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                            v: Optional[Array] = None, qv: Optional[Array] = None,
                            rotary_cos: Optional[Array] = None, rotary_sin: Optional[Array] = None,
                            cache_seqlens: Optional[Union[int, Array]] = None,
                            cache_batch_idx: Optional[Array] = None, cache_leftpad: Optional[Array] = None,
                            page_table: Optional[Array] = None, cu_seqlens_q: Optional[Array] = None,
                            cu_seqlens_k_new: Optional[Array] = None, max_seqlen_q: Optional[int] = None,
                            rotary_seqlens: Optional[Array] = None, q_descale: Optional[Array] = None,
                            k_descale: Optional[Array] = None, v_descale: Optional[Array] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Window = (-1, -1), attention_chunk: int = 0, softcap: float = 0.0,
                            rotary_interleaved: bool = True, scheduler_metadata: Optional[Array] = None,
                            num_splits: int = 0, pack_gqa: Optional[bool] = None, sm_margin: int = 0,
                            return_softmax_lse: bool = False) -> Any:
    """FlashAttention-3's flash_attn_with_kvcache: attention of q over a KV cache, optionally
    appending k/v to the cache first (in place, at cache_seqlens), with rotary embedding. Not
    differentiable.

    Arguments:
        q: (batch, seqlen_q, nheads, headdim).
        k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k, headdim[_v]), or paged
            (num_blocks, page_block_size, nheads_k, headdim[_v]) with page_table. Written only
            when k/v are given.
        k, v: (batch, seqlen_new, nheads_k, headdim[_v]), optional: appended at cache_seqlens[b].
        qv: not supported yet.
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), optional: rotate k and q (q at
            cache_seqlens[b] + i when causal or windowed, else at cache_seqlens[b]).
        cache_seqlens: int or int32 (batch,): tokens already in each cache row (None: all).
        cache_batch_idx: int32 (batch,), optional: the cache row of each batch entry.
        cache_leftpad: int32 (batch,), optional: the cache position where each sequence starts
            (left padding).
        page_table: int32 (batch, max_num_pages_per_seq), optional: a paged cache's page indices.
        cu_seqlens_q: int32 (batch + 1,), optional: varlen queries, q (total_q, nheads, headdim);
            out is then (total_q, nheads, headdim_v) and softmax_lse (nheads, total_q).
        max_seqlen_q: int, the longest query sequence with cu_seqlens_q (None: derived from a host
            cu_seqlens_q); accepted and ignored without it (as FA3).
        cu_seqlens_k_new: not supported yet (varlen new keys).
        rotary_seqlens: not supported yet.
        q_descale, k_descale, v_descale: as flash_attn_func, for float8_e4m3fn q, caches and k/v
            (float32 (batch, nheads_k), batch = q's); no rotary with fp8.
        softmax_scale, causal, window_size, softcap: as flash_attn_func; attention_chunk: only 0.
        rotary_interleaved: bool. True: pairs (0, 1), (2, 3), ... (GPT-J); False: GPT-NeoX halves.
        scheduler_metadata: FA3's precomputed schedule (get_scheduler_metadata); accepted, ignored.
        num_splits: int. Split-KV chunks; 0 = the library chooses.
        pack_gqa, sm_margin: speed hints; accepted, ignored.
        return_softmax_lse: bool.

    Returns:
        out (batch, seqlen_q, nheads, headdim_v), or with return_softmax_lse the 4-tuple
        (out, softmax_lse float32 (batch, nheads, seqlen_q), out_accum, softmax_lse_accum) that FA3
        returns; the last two are empty float32 tensors (no split partials are exposed).
    """
    _unsupported(cu_seqlens_k_new, "cu_seqlens_k_new", "varlen new keys in flash_attn_with_kvcache")
    _unsupported(rotary_seqlens, "rotary_seqlens", "rotary positions other than cache_seqlens")
    _no_qv_or_chunks(qv, attention_chunk)
    _hints(pack_gqa, sm_margin)
    _args.optional_integer(max_seqlen_q, "max_seqlen_q", 0)  # a hint without cu_seqlens_q
    kind = _args.first_tensor(q, "q")
    _args.tensor(scheduler_metadata, "scheduler_metadata", kind, optional=True)
    out, lse = _kvcache(q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                        cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                        block_table=page_table,
                        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                        rotary_interleaved=rotary_interleaved, alibi_slopes=None, num_splits=num_splits,
                        block_table_name="page_table", cu_seqlens_q=cu_seqlens_q,
                        max_seqlen_q=max_seqlen_q if cu_seqlens_q is not None else None, q_descale=q_descale,
                        k_descale=k_descale, v_descale=v_descale)
    if _args.flag(return_softmax_lse, "return_softmax_lse"):
        return out, lse, _empty(q), _empty(q)
    return out


def get_scheduler_metadata(batch_size: int, max_seqlen_q: int, max_seqlen_k: int, num_heads_q: int,
                           num_heads_kv: int, headdim: int, cache_seqlens: Array, qkv_dtype: Any = None,
                           headdim_v: Optional[int] = None, cu_seqlens_q: Optional[Array] = None,
                           cu_seqlens_k_new: Optional[Array] = None, cache_leftpad: Optional[Array] = None,
                           page_size: Optional[int] = None, max_seqlen_k_new: int = 0, causal: bool = False,
                           window_size: Window = (-1, -1), attention_chunk: int = 0, has_softcap: bool = False,
                           num_splits: int = 0, pack_gqa: Optional[bool] = None, sm_margin: int = 0) -> Array:
    """FlashAttention-3's get_scheduler_metadata: FA3 precomputes a decode schedule for
    flash_attn_with_kvcache. This library schedules on its own, so after checking the arguments
    (as FA3 would) it returns an empty int32 tensor on cache_seqlens' device, which
    flash_attn_with_kvcache accepts as scheduler_metadata.

    Arguments (the call flash_attn_with_kvcache will make):
        batch_size, max_seqlen_q, max_seqlen_k: ints >= 0.
        num_heads_q, num_heads_kv, headdim: ints >= 1; headdim_v: int (None: headdim).
        cache_seqlens: int32 (batch,), the tokens in each cache row.
        qkv_dtype: the inputs' dtype (FA3 defaults to torch.bfloat16); unused.
        cu_seqlens_q, cache_leftpad: optional int32 tensors, checked like cache_seqlens.
        cu_seqlens_k_new: not supported yet (UnsupportedError).
        page_size: int, a paged cache's page_block_size (None: not paged).
        max_seqlen_k_new: int, the longest appended k.
        causal, window_size, has_softcap: the attention's masks and softcap.
        attention_chunk: only 0. num_splits: int >= 0.
        pack_gqa, sm_margin: speed hints; checked, ignored.

    Returns:
        An empty int32 tensor (numpy array for numpy cache_seqlens).
    """
    for name, value in (("batch_size", batch_size), ("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k),
                        ("max_seqlen_k_new", max_seqlen_k_new)):
        _args.integer(value, name, 0)
    for name, value in (("num_heads_q", num_heads_q), ("num_heads_kv", num_heads_kv), ("headdim", headdim)):
        _args.integer(value, name, 1)
    _args.optional_integer(headdim_v, "headdim_v", 1, default=1)
    _args.optional_integer(page_size, "page_size", 1, default=1)
    kind = _args.first_tensor(cache_seqlens, "cache_seqlens")
    _args.tensor(cache_leftpad, "cache_leftpad", kind, optional=True)
    _args.tensor(cu_seqlens_q, "cu_seqlens_q", kind, optional=True)
    _unsupported(cu_seqlens_k_new, "cu_seqlens_k_new", "varlen new keys in flash_attn_with_kvcache")
    _no_qv_or_chunks(None, attention_chunk)
    _hints(pack_gqa, sm_margin)
    _args.flag(causal, "causal")
    _args.flag(has_softcap, "has_softcap")
    _args.window(window_size)
    _args.integer(num_splits, "num_splits", 0)
    return _empty(cache_seqlens, "int32")


__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_with_kvcache",
           "flash_attn_combine", "get_scheduler_metadata"]
