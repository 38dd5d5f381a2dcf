"""Rotary position embedding with the signature of ``flash_attn.layers.rotary.apply_rotary_emb``,
in plain torch (autograd flows through it) or numpy. The same rotation fwd_kvcache applies:

    non-interleaved (GPT-NeoX): pairs (x[i], x[i + rotary_dim/2])
    interleaved (GPT-J):        pairs (x[2i], x[2i + 1])
    (x1, x2) -> (x1*cos - x2*sin, x1*sin + x2*cos), cos/sin at the token's position

Only the first rotary_dim = 2 * cos.shape[-1] features rotate; the rest pass through.
"""
from __future__ import annotations

from typing import Any, Optional, Union

Array = Any


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


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


def apply_rotary_emb(x: Array, cos: Array, sin: Array, interleaved: bool = False, inplace: bool = False,
                     seqlen_offsets: Union[int, Array] = 0, cu_seqlens: Optional[Array] = None,
                     max_seqlen: Optional[int] = None) -> Array:
    """x (batch, seqlen, nheads, headdim), or (total, nheads, headdim) with cu_seqlens (batch + 1);
    cos, sin (seqlen_ro, rotary_dim / 2); seqlen_offsets an int or (batch,) (the position of each
    sequence's first token, e.g. the KV cache length when decoding). Returns the rotated x (x itself
    when inplace)."""
    torch_path = _is_torch(x)
    half = cos.shape[-1]
    rotary_dim = 2 * half
    if rotary_dim > x.shape[-1]:
        raise ValueError(f"argument 'cos': rotary_dim (2 * {half}) must be <= headdim ({x.shape[-1]})")
    pos = _positions(x, seqlen_offsets, cu_seqlens)
    c = cos[pos][..., None, :]  # (..., 1, half): broadcast over heads
    s = sin[pos][..., None, :]
    if torch_path:
        c, s = c.to(x.dtype), s.to(x.dtype)
    else:
        c, s = c.astype(x.dtype), s.astype(x.dtype)
    rot = x[..., :rotary_dim]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    y1 = x1 * c - x2 * s
    y2 = x1 * s + x2 * c
    if torch_path:
        import torch

        rotated = torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), dim=-1)
    else:
        import numpy as np

        rotated = (np.stack((y1, y2), axis=-1).reshape(y1.shape[:-1] + (rotary_dim,)) if interleaved
                   else np.concatenate((y1, y2), axis=-1))
    if inplace:
        x[..., :rotary_dim] = rotated
        return x
    if rotary_dim == x.shape[-1]:
        return rotated
    if torch_path:
        import torch

        return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)
    import numpy as np

    return np.concatenate((rotated, x[..., rotary_dim:]), axis=-1)
