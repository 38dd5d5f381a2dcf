"""FP8 inputs for the fp8 forward: ``quantize_fp8`` turns a float torch tensor into
``float8_e4m3fn`` values and the per-(sequence, kv head) descale factors that
``flashattn.fa3_interface.flash_attn_func`` (and the varlen and kvcache functions) take::

    q8, qd = quantize_fp8(q, heads_k=k.shape[2])   # q's factors are per kv head, as FA3 takes them
    k8, kd = quantize_fp8(k)
    v8, vd = quantize_fp8(v)
    out = flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)   # bfloat16

Outlier channels (a few dimensions of q and k much larger than the rest) make one factor per head
coarse for every other channel. ``incoherent_qk`` applies FlashAttention-3's remedy first: one
random orthogonal rotation R of the head dimension on both q and k (q R (k R)^T = q k^T, so the
attention is unchanged) spreads the outliers over all channels before quantisation::

    q, k = incoherent_qk(q, k)           # then quantize_fp8 as above

Torch only: numpy has no fp8 dtype.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from . import _args
from ._errors import DTypeError

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value


def quantize_fp8(x: Any, *, heads_k: Optional[int] = None, cu_seqlens: Any = None) -> Tuple[Any, Any]:
    """Quantises x to float8_e4m3fn with one scale per (sequence, kv head).

    Arguments:
        x: torch tensor, float32/float16/bfloat16 (float64 too), (batch, seqlen, nheads, headdim),
            or varlen (total, nheads, headdim) with cu_seqlens.
        heads_k: int, the kv heads the factors are laid out for (default nheads). Pass k's nheads_k
            when quantising q under GQA/MQA: FlashAttention-3 takes q_descale per kv head, so one
            factor covers the nheads // heads_k query heads of each group.
        cu_seqlens: int32 (batch + 1,), varlen only: the sequences' offsets (read on the tensor's
            device; rows past cu_seqlens[-1] are quantised by their own, discarded, factor).

    Returns:
        (x_fp8, descale): x_fp8 of x's shape, dtype float8_e4m3fn, and descale float32
        (batch, heads_k), so that x ~= x_fp8.float() * descale[b, h // (nheads // heads_k)]. Each
        group's largest |x| maps to 448 (descale = amax / 448); a group of zeros gets descale 1.
    """
    if _args.array_kind(x) == "numpy":
        raise _args.type_error("x", "must be a torch.Tensor (numpy has no fp8 dtype)", x)
    _args.tensor(x, "x", "torch")
    import torch

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise DTypeError(f"argument 'x': dtype must be float32, float16, bfloat16 or float64, got {x.dtype}", "x",
                         "invalid_argument")
    varlen = _args.tensor(cu_seqlens, "cu_seqlens", "torch", optional=True) is not None
    _args.ndim(x, "x", 3 if varlen else 4,
               "(total, nheads, headdim) with cu_seqlens" if varlen else "(batch, seqlen, nheads, headdim)")
    heads = int(x.shape[-2])
    groups = heads if heads_k is None else _args.integer(heads_k, "heads_k", 1)
    if heads % groups != 0:
        raise _args.value_error("heads_k", f"must divide the heads of x ({heads})", str(groups))
    group = heads // groups

    x = x.detach()
    magnitude = x.abs().amax(dim=-1).float()  # (batch, seqlen, heads) or (total, heads)
    magnitude = magnitude.unflatten(-1, (groups, group)).amax(dim=-1)  # per kv head
    if varlen:
        _args.ndim(cu_seqlens, "cu_seqlens", 1, "(batch + 1,)")
        batch = int(cu_seqlens.shape[0]) - 1
        rows = torch.arange(x.shape[0], device=x.device)
        # Row r belongs to sequence b with cu_seqlens[b] <= r < cu_seqlens[b + 1]; rows past the end
        # to a last, discarded bucket (no host synchronisation).
        seq = torch.searchsorted(cu_seqlens[1:].to(device=x.device, dtype=torch.int64), rows, right=True)
        amax = torch.zeros(batch + 1, groups, dtype=torch.float32, device=x.device)
        amax = amax.scatter_reduce(0, seq[:, None].expand(-1, groups), magnitude, reduce="amax")
        descale_rows = _descale_of(amax)[seq]  # (total, heads_k)
        descale = _descale_of(amax)[:batch]
    else:
        amax = magnitude.amax(dim=1)  # (batch, heads_k)
        descale = _descale_of(amax)
        descale_rows = descale[:, None]  # (batch, 1, heads_k)
    scale = descale_rows.repeat_interleave(group, dim=-1)[..., None]
    x_fp8 = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x_fp8, descale.contiguous()


def _descale_of(amax: Any) -> Any:
    """amax / 448, and 1 where amax is 0 (nothing to scale)."""
    import torch

    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def incoherent_rotation(head_dim: int, *, seed: int = 0, device: Any = None) -> Any:
    """A random orthogonal (head_dim, head_dim) float32 matrix for ``incoherent_qk``: a randomised
    Hadamard transform, diag(random signs) @ H / sqrt(n), on each block of a split of head_dim into
    powers of two (a whole Hadamard matrix when head_dim is one; e.g. 96 = 64 + 32), the blocks in a
    random order of the channels. Orthogonal to float32 rounding; the same seed gives the same
    matrix."""
    import torch

    n = _args.integer(head_dim, "head_dim", 1)
    seed = _args.integer(seed, "seed", 0)
    g = torch.Generator().manual_seed(seed)
    rotation = torch.zeros((n, n), dtype=torch.float64)
    start, remaining = 0, n
    while remaining > 0:
        size = 1 << (remaining.bit_length() - 1)  # the largest power of two left
        hadamard = torch.ones((1, 1), dtype=torch.float64)
        while hadamard.shape[0] < size:  # Sylvester's construction
            hadamard = torch.cat([torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0)
        signs = torch.randint(0, 2, (size,), generator=g, dtype=torch.float64) * 2 - 1
        rotation[start:start + size, start:start + size] = signs[:, None] * hadamard / math.sqrt(size)
        start, remaining = start + size, remaining - size
    # A random permutation of the channels mixes the blocks' boundaries into every block's share.
    permutation = torch.randperm(n, generator=g)
    return rotation[permutation].to(dtype=torch.float32, device=device)


def incoherent_qk(q: Any, k: Any, *, seed: int = 0, rotation: Any = None) -> Tuple[Any, Any]:
    """(q @ R, k @ R) in q's and k's dtypes, with R = ``incoherent_rotation(headdim, seed=seed)``
    (or ``rotation``, a (headdim, headdim) orthogonal matrix). Attention over the rotated q and k
    equals attention over q and k (q R (k R)^T = q k^T; softmax_scale, masks, softcap and ALiBi act
    on those products and positions alone), but channels that stood out in q or k are spread over
    all channels, so per-head fp8 factors lose less of the others. Quantise the results with
    ``quantize_fp8``; v stays as it is. q: (..., headdim), k: (..., headdim), torch tensors."""
    _args.tensor(q, "q", "torch")
    _args.tensor(k, "k", "torch")
    import torch

    d = int(q.shape[-1])
    _args.dim(k, "k", -1, d, "the head_dim of q")
    for name, x in (("q", q), ("k", k)):
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            raise DTypeError(f"argument '{name}': dtype must be float32, float16, bfloat16 or float64 (rotate "
                             f"before quantising), got {x.dtype}", name, "invalid_argument")
    if rotation is None:
        rotation = incoherent_rotation(d, seed=seed, device=q.device)
    else:
        _args.tensor(rotation, "rotation", "torch")
        if tuple(rotation.shape) != (d, d):
            raise _args.value_error("rotation", f"must be ({d}, {d}) (head_dim of q)", str(tuple(rotation.shape)))
    r = rotation.to(device=q.device, dtype=torch.float32)
    return (q.float() @ r).to(q.dtype), (k.float() @ r.to(k.device)).to(k.dtype)
