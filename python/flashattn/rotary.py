"""Rotary position embedding with the interface of ``flash_attn.layers.rotary``: ``apply_rotary_emb``
(alias ``apply_rotary_emb_func``), the in-place ``apply_rotary_emb_qkv_`` and ``apply_rotary_emb_kv_``,
and the ``RotaryEmbedding`` module. Plain torch (autograd flows through it) or numpy; the rotation
is the one fwd_kvcache applies:

    non-interleaved (GPT-NeoX): pairs (x[i], x[i + rotary_dim/2])
    interleaved (GPT-J):        pairs (x[2i], x[2i + 1])
    (x1, x2) -> (x1*cos - x2*sin, x1*sin + x2*cos), cos/sin at the token's position

Only the first rotary_dim = 2 * cos.shape[-1] features rotate; the rest pass through. As upstream,
the rotation is computed in float32 (x, cos and sin are read as float32 and the result rounded once
to x's dtype; float64 stays float64), so bfloat16/float16 inputs lose nothing to intermediate rounding.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

from . import _args

if TYPE_CHECKING:  # for checkers; at run time __getattr__ below defines it on first access
    from ._rotary_embedding import RotaryEmbedding

Array = Any


def _is_torch(x: Any) -> bool:
    return _args.array_kind(x) == "torch"


def _positions(x: Array, seqlen_offsets: Union[int, Array], cu_seqlens: Optional[Array]) -> Array:
    """The position of every token: (batch, seqlen) dense, (total,) varlen."""
    torch_path = _is_torch(x)
    if torch_path:
        import torch as xp

        arange = lambda n: xp.arange(n, device=x.device)  # noqa: E731
        as_index = lambda a: xp.as_tensor(a, device=x.device).long()  # noqa: E731
    else:
        import numpy as xp

        arange = xp.arange
        as_index = lambda a: xp.asarray(a).astype(xp.int64)  # noqa: E731
    if cu_seqlens is None:
        pos = arange(x.shape[1])[None, :]
        offsets = as_index(seqlen_offsets)
        return pos + (offsets[:, None] if offsets.ndim == 1 else offsets)
    cu = as_index(cu_seqlens)
    total = x.shape[0]
    rows = arange(total)
    # the sequence each packed row belongs to, and its position inside it
    if torch_path:
        seq = xp.searchsorted(cu[1:], rows, right=True)
    else:
        seq = xp.searchsorted(cu[1:], rows, side="right")
    seq_clamped = seq.clip(0, cu.shape[0] - 2) if not torch_path else seq.clamp(0, cu.shape[0] - 2)
    pos = rows - cu[seq_clamped]
    offsets = as_index(seqlen_offsets)
    return pos + (offsets[seq_clamped] if offsets.ndim == 1 else offsets)


def _check(x: Any, cos: Any, sin: Any, seqlen_offsets: Any, cu_seqlens: Any) -> str:
    kind = _args.first_tensor(x, "x")
    _args.tensor(cos, "cos", kind)
    _args.tensor(sin, "sin", kind)
    if tuple(sin.shape) != tuple(cos.shape):
        raise _args.value_error("sin", f"shape must equal cos's {list(cos.shape)}", str(list(sin.shape)))
    _args.ndim(cos, "cos", 2, "(seqlen_rotary, rotary_dim / 2)")
    _args.ndim(x, "x", 4 if cu_seqlens is None else 3,
               "(batch, seqlen, nheads, headdim)" if cu_seqlens is None else "(total, nheads, headdim)")
    if _args.array_kind(seqlen_offsets) is None:
        _args.integer(seqlen_offsets, "seqlen_offsets", 0)
    else:
        _args.tensor(seqlen_offsets, "seqlen_offsets", kind)
    _args.tensor(cu_seqlens, "cu_seqlens", kind, optional=True)
    if 2 * cos.shape[-1] > x.shape[-1]:
        raise _args.value_error("cos", f"rotary_dim (2 * dim 1) must be <= headdim ({x.shape[-1]})",
                                str(2 * cos.shape[-1]))
    return kind


def _rotated(x: Array, cos: Array, sin: Array, interleaved: bool, seqlen_offsets: Union[int, Array],
             cu_seqlens: Optional[Array], conjugate: bool = False) -> Array:
    """The first rotary_dim features of x rotated (by -angle with conjugate), computed in float32
    and returned in x's dtype."""
    torch_path = _is_torch(x)
    half = cos.shape[-1]
    rotary_dim = 2 * half
    pos = _positions(x, seqlen_offsets, cu_seqlens)
    if torch_path:
        import torch

        compute = torch.promote_types(x.dtype, torch.float32)
        c = cos[pos][..., None, :].to(compute)  # (..., 1, half): broadcast over heads
        s = sin[pos][..., None, :].to(compute)
        rot = x[..., :rotary_dim].to(compute)
    else:
        import numpy as np

        compute = np.promote_types(x.dtype, np.float32)
        c = cos[pos][..., None, :].astype(compute)
        s = sin[pos][..., None, :].astype(compute)
        rot = x[..., :rotary_dim].astype(compute)
    if conjugate:
        s = -s
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    y1 = x1 * c - x2 * s
    y2 = x1 * s + x2 * c
    if torch_path:
        import torch

        out = torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), dim=-1)
        return out.to(x.dtype)
    import numpy as np

    out = (np.stack((y1, y2), axis=-1).reshape(y1.shape[:-1] + (rotary_dim,)) if interleaved
           else np.concatenate((y1, y2), axis=-1))
    return out.astype(x.dtype, copy=False)


def apply_rotary_emb(x: Array, cos: Array, sin: Array, interleaved: bool = False, inplace: bool = False,
                     seqlen_offsets: Union[int, Array] = 0, cu_seqlens: Optional[Array] = None,
                     max_seqlen: Optional[int] = None) -> Array:
    """Rotates the first rotary_dim features of x by the angle of each token's position.

    Arguments:
        x: (batch, seqlen, nheads, headdim), or (total, nheads, headdim) with cu_seqlens.
        cos, sin: (seqlen_rotary, rotary_dim / 2), rotary_dim <= headdim: the cosines and sines of
            each position's angles (covering every position used: seqlen + offsets).
        interleaved: False rotates pairs (i, i + rotary_dim / 2) (GPT-NeoX), True pairs (2i, 2i + 1)
            (GPT-J).
        inplace: write the result into x (and return x).
        seqlen_offsets: int, or int (batch,): the position of each sequence's first token (e.g.
            the KV cache length when decoding).
        cu_seqlens: int32 (batch + 1,), optional: x holds packed sequences (varlen layout).
        max_seqlen: accepted for flash_attn's signature; not needed here.

    Returns:
        The rotated x, same shape and dtype (x itself when inplace). Differentiable (torch).
    """
    _check(x, cos, sin, seqlen_offsets, cu_seqlens)
    rotary_dim = 2 * cos.shape[-1]
    rotated = _rotated(x, cos, sin, _args.flag(interleaved, "interleaved"), seqlen_offsets, cu_seqlens)
    if _args.flag(inplace, "inplace"):
        x[..., :rotary_dim] = rotated
        return x
    if rotary_dim == x.shape[-1]:
        return rotated
    if _is_torch(x):
        import torch

        return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)
    import numpy as np

    return np.concatenate((rotated, x[..., rotary_dim:]), axis=-1)


# flash_attn keeps this name for backward compatibility.
apply_rotary_emb_func = apply_rotary_emb


def _rotate_in_place(x: Array, cos: Array, sin: Array, interleaved: bool, seqlen_offsets: Any,
                     conjugate: bool = False) -> None:
    rotary_dim = 2 * cos.shape[-1]
    x[..., :rotary_dim] = _rotated(x, cos, sin, interleaved, seqlen_offsets, None, conjugate)


def _qkv_parts(qkv: Array, num_heads_q: Optional[int]) -> Tuple[Array, Array]:
    """Views of q and k inside a packed qkv: (b, s, 3, h, d), or (b, s, hq + 2 hk, d) with num_heads_q."""
    if qkv.ndim == 5:
        _args.dim(qkv, "qkv", 2, 3, "the number of packed tensors")
        return qkv[:, :, 0], qkv[:, :, 1]
    _args.ndim(qkv, "qkv", 4, "(batch, seqlen, num_heads_q + 2 * num_heads_k, headdim) (or 5: (b, s, 3, h, d))")
    if num_heads_q is None:
        raise _args.type_error("num_heads_q", "must be given for a 4-dim qkv (num_heads_q + 2 * num_heads_k heads)",
                               None)
    heads_q = _args.integer(num_heads_q, "num_heads_q", 1)
    heads_k, rest = divmod(qkv.shape[2] - heads_q, 2)
    if rest or heads_k < 1:
        raise _args.value_error("num_heads_q", f"must leave an even, positive number of the {qkv.shape[2]} heads "
                                "for k and v", str(heads_q))
    return qkv[:, :, :heads_q], qkv[:, :, heads_q:heads_q + heads_k]


def _rotate_qkv(qkv: Array, cos: Array, sin: Array, cos_k: Optional[Array], sin_k: Optional[Array],
                interleaved: bool, seqlen_offsets: Any, num_heads_q: Optional[int], conjugate: bool) -> None:
    q, k = _qkv_parts(qkv, num_heads_q)
    _rotate_in_place(q, cos, sin, interleaved, seqlen_offsets, conjugate)
    _rotate_in_place(k, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k, interleaved,
                     seqlen_offsets, conjugate)


def apply_rotary_emb_qkv_(qkv: Array, cos: Array, sin: Array, cos_k: Optional[Array] = None,
                          sin_k: Optional[Array] = None, interleaved: bool = False,
                          seqlen_offsets: Union[int, Array] = 0, num_heads_q: Optional[int] = None) -> Array:
    """Rotates q and k inside a packed qkv *in place* (v untouched) and returns qkv.

    Arguments:
        qkv: (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, num_heads_q + 2 * num_heads_k,
            headdim) for GQA/MQA, with num_heads_q given.
        cos, sin: (seqlen_rotary, rotary_dim / 2), for q (and k unless cos_k/sin_k are given).
        cos_k, sin_k: optional tables for k (XPos scales q and k differently).
        interleaved, seqlen_offsets: as apply_rotary_emb.
        num_heads_q: int, the query heads of a 4-dim qkv.

    Differentiable (torch): the gradient is rotated back by the conjugate angle."""
    _check(qkv[:, :, 0] if qkv.ndim == 5 else qkv, cos, sin, seqlen_offsets, None)
    for name, table in (("cos_k", cos_k), ("sin_k", sin_k)):
        _args.tensor(table, name, _args.array_kind(qkv), optional=True)
    interleaved = _args.flag(interleaved, "interleaved")
    if _is_torch(qkv):
        return _torch_functions().ApplyRotaryQKV.apply(qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets,
                                                       num_heads_q)
    _rotate_qkv(qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q, conjugate=False)
    return qkv


def apply_rotary_emb_kv_(kv: Array, cos: Array, sin: Array, interleaved: bool = False,
                         seqlen_offsets: Union[int, Array] = 0) -> Array:
    """Rotates k inside a packed kv (batch, seqlen, 2, nheads, headdim) *in place* (v untouched)
    and returns kv. cos, sin (seqlen_rotary, rotary_dim / 2), interleaved and seqlen_offsets as in
    apply_rotary_emb. Differentiable (torch)."""
    _args.first_tensor(kv, "kv")
    _args.ndim(kv, "kv", 5, "(batch, seqlen, 2, nheads, headdim)")
    _args.dim(kv, "kv", 2, 2, "the number of packed tensors")
    _check(kv[:, :, 0], cos, sin, seqlen_offsets, None)
    interleaved = _args.flag(interleaved, "interleaved")
    if _is_torch(kv):
        return _torch_functions().ApplyRotaryKV.apply(kv, cos, sin, interleaved, seqlen_offsets)
    _rotate_in_place(kv[:, :, 0], cos, sin, interleaved, seqlen_offsets)
    return kv


_TORCH_FUNCTIONS: Any = None


def _torch_functions() -> Any:
    """The autograd.Functions of the in-place variants, defined on first use (torch is optional)."""
    global _TORCH_FUNCTIONS
    if _TORCH_FUNCTIONS is not None:
        return _TORCH_FUNCTIONS
    import types

    import torch

    class ApplyRotaryQKV(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, qkv: Any, cos: Any, sin: Any, cos_k: Any, sin_k: Any, interleaved: bool,
                    seqlen_offsets: Any, num_heads_q: Optional[int]) -> Any:
            _rotate_qkv(qkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q, conjugate=False)
            ctx.mark_dirty(qkv)
            ctx.save_for_backward(cos, sin, cos_k, sin_k)
            ctx.options = (interleaved, seqlen_offsets, num_heads_q)
            return qkv

        @staticmethod
        def backward(ctx: Any, dqkv: Any) -> Tuple[Any, ...]:
            cos, sin, cos_k, sin_k = ctx.saved_tensors
            interleaved, seqlen_offsets, num_heads_q = ctx.options
            dqkv = dqkv.clone()
            _rotate_qkv(dqkv, cos, sin, cos_k, sin_k, interleaved, seqlen_offsets, num_heads_q, conjugate=True)
            return (dqkv,) + (None,) * 7

    class ApplyRotaryKV(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, kv: Any, cos: Any, sin: Any, interleaved: bool, seqlen_offsets: Any) -> Any:
            _rotate_in_place(kv[:, :, 0], cos, sin, interleaved, seqlen_offsets)
            ctx.mark_dirty(kv)
            ctx.save_for_backward(cos, sin)
            ctx.options = (interleaved, seqlen_offsets)
            return kv

        @staticmethod
        def backward(ctx: Any, dkv: Any) -> Tuple[Any, ...]:
            cos, sin = ctx.saved_tensors
            interleaved, seqlen_offsets = ctx.options
            dkv = dkv.clone()
            _rotate_in_place(dkv[:, :, 0], cos, sin, interleaved, seqlen_offsets, conjugate=True)
            return (dkv,) + (None,) * 4

    _TORCH_FUNCTIONS = types.SimpleNamespace(ApplyRotaryQKV=ApplyRotaryQKV, ApplyRotaryKV=ApplyRotaryKV)
    return _TORCH_FUNCTIONS


def __getattr__(name: str) -> Any:
    # RotaryEmbedding is a torch.nn.Module: defined on first access, so that importing this module
    # does not import torch.
    if name == "RotaryEmbedding":
        from ._rotary_embedding import RotaryEmbedding

        return RotaryEmbedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_",
           "RotaryEmbedding"]
