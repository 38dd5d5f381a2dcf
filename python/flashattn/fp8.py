"""FP8 inputs for the fp8 forward: ``quantize_fp8`` turns a float torch tensor into
``float8_e4m3fn`` values and the per-(sequence, kv head) descale factors that
``flashattn.fa3_interface.flash_attn_func`` (and the varlen and kvcache functions) take::

    q8, qd = quantize_fp8(q, heads_k=k.shape[2])   # q's factors are per kv head, as FA3 takes them
    k8, kd = quantize_fp8(k)
    v8, vd = quantize_fp8(v)
    out = flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)   # bfloat16

Torch only: numpy has no fp8 dtype.
"""
from __future__ import annotations

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
