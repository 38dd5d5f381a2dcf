"""The ``flash_attn`` interface: same names, argument order, defaults, shapes and return values as
``flash_attn.flash_attn_interface`` (2.7), plus FlashAttention-3's ``flash_attn_combine`` and the
private ``_flash_attn_forward``/``_backward`` (and varlen) entries that ring-attention libraries call.

Every function takes torch tensors (differentiable through torch.autograd, on the CPU backend for
host tensors and the GPU backends for CUDA tensors) or numpy arrays (host, CPU backend, forward
only; ``flashattn.numpy_api.bwd`` gives gradients). Extra arguments beyond flash_attn's are
keyword-only and come last.

Conventions every function shares (the README's "Layout and conventions"):

* Layouts: dense ``(batch, seqlen, nheads, headdim)``; varlen (packed sequences)
  ``(total_tokens, nheads, headdim)`` with int32 ``cu_seqlens`` of ``batch + 1`` offsets. The last
  dim must be contiguous; inputs whose last dim is strided are copied, as flash_attn does.
* GQA/MQA: k and v may have fewer heads than q (``nheads % nheads_k == 0``); query head ``h`` uses
  key head ``h // (nheads // nheads_k)``.
* ``causal``: the mask is aligned to the bottom-right corner of the ``seqlen_q x seqlen_k`` score
  matrix: query ``i`` sees key ``j`` iff ``j <= i + seqlen_k - seqlen_q``. A row that sees no key
  gives output 0 and LSE -inf.
* ``window_size=(left, right)``: query ``i`` sees keys ``j`` with
  ``i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right``; ``-1`` leaves that side
  unbounded; ``causal`` is ``right = 0``.
* ``softmax_scale`` defaults to ``1 / sqrt(headdim)``; ``softcap > 0`` maps a logit ``s`` to
  ``softcap * tanh(s / softcap)``; ``alibi_slopes`` (float32 ``(nheads,)`` or ``(batch, nheads)``)
  adds ``-slope * |i + seqlen_k - seqlen_q - j|``.
* ``softmax_lse``: float32 ``(batch, nheads, seqlen_q)`` (varlen ``(nheads, total_q)``), the natural
  log of each row's softmax denominator.

Bad arguments raise ``flashattn.ArgumentError`` (a ``ValueError``), ``ArgumentTypeError`` /
``DTypeError`` (also ``TypeError``) or ``UnsupportedError``, all naming the argument and all also
``RuntimeError``, which flash_attn raises. Differences from flash_attn are listed in the README.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from . import _args
from ._errors import ArgumentError, FlashAttnError, UnsupportedError

Array = Any  # a torch.Tensor or a numpy.ndarray
Window = Tuple[int, int]

_MAX_HEAD_DIM = 256
_DENSE = "(batch, seqlen, nheads, headdim)"
_VARLEN = "(total_tokens, nheads, headdim)"


def _is_torch(x: Any) -> bool:
    return _args.array_kind(x) == "torch"


def _is_fp8(x: Any) -> bool:
    """A float8_e4m3fn torch tensor (numpy has no fp8 dtype)."""
    return _is_torch(x) and str(x.dtype) == "torch.float8_e4m3fn"


def _padded_size(head_dim: int) -> int:
    return (head_dim + 7) // 8 * 8


def _pad_head_dim(x: Optional[Array], name: str) -> Optional[Array]:
    """Zero-pads the last dim to a multiple of 8 (the kernels' granule; 16 for fp8, whose rows the
    kernels load in 16-byte vectors too). Zeros change neither q.k nor the output columns that are
    kept, so the caller's result is exact after slicing back."""
    if x is None:
        return None
    head_dim = x.shape[-1]
    if head_dim > _MAX_HEAD_DIM:
        raise ArgumentError(f"argument '{name}': head_dim must be <= {_MAX_HEAD_DIM}, got {head_dim}", name,
                            "invalid_argument")
    pad = (_round_up(head_dim, 16) if _is_fp8(x) else _padded_size(head_dim)) - head_dim
    if pad == 0:
        return x
    if _is_torch(x):
        import torch.nn.functional as F

        return F.pad(x, (0, pad))
    import numpy as np

    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])


def _caller_names(renames: Dict[str, str], kind: str) -> Any:
    """The library names its own arguments (k_new, block_table, the k and v cut from a packed
    kv): its errors name them as the caller passed them (renames: library name -> caller's).
    Under torch.compile the renaming is skipped (dynamo cannot trace a generator context manager):
    errors from a compiled call keep the library's names."""
    if kind == "torch":
        import torch

        if torch.compiler.is_compiling():
            return contextlib.nullcontext()
    return _renaming_errors(renames)


@contextlib.contextmanager
def _renaming_errors(renames: Dict[str, str]) -> Iterator[None]:
    try:
        yield
    except FlashAttnError as error:
        name = renames.get(error.argument)
        if name is None or name == error.argument:
            raise
        message = str(error).replace(f"argument '{error.argument}'", f"argument '{name}'", 1)
        raise type(error)(message, name, error.code) from None


def _same_head_dim(x: Optional[Array], name: str, expected: int, meaning: str) -> None:
    """The library compares head dims after the padding to multiples of 8, where 20 and 21 look
    alike (and the extra column would be dropped silently): compare the caller's sizes first."""
    if x is not None:
        _args.dim(x, name, -1, expected, meaning)


def _default_scale(softmax_scale: Any, head_dim: int) -> float:
    # Computed here, from the caller's head_dim, because the library sees the padded one.
    scale = _args.optional_real(softmax_scale, "softmax_scale")
    return scale if scale is not None else 1.0 / math.sqrt(head_dim)


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


# ---------------------------------------------------------------------------------------------
# Argument checks shared by the entry points
# ---------------------------------------------------------------------------------------------
class _Call:
    """The checked, normalised arguments of one attention call (dense or varlen)."""

    def __init__(self, q: Any, k: Any, v: Any, *, varlen: bool, names: Tuple[str, str, str] = ("q", "k", "v"),
                 cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: Any = None,
                 max_seqlen_k: Any = None, seqused_k: Any = None, dropout_p: Any = 0.0, softmax_scale: Any = None,
                 causal: Any = False, window_size: Any = (-1, -1), softcap: Any = 0.0, alibi_slopes: Any = None,
                 deterministic: Any = False, num_splits: Any = 1, block_table: Any = None, q_descale: Any = None,
                 k_descale: Any = None, v_descale: Any = None) -> None:
        self.kind = _args.first_tensor(q, names[0])
        _args.tensor(k, names[1], self.kind)
        _args.tensor(v, names[2], self.kind)
        self.fp8 = _is_fp8(q)
        self.descales = _descales(self.kind, q_descale, k_descale, v_descale)
        self.block_table = _args.last_dim_contiguous(
            _args.tensor(block_table, "block_table", self.kind, optional=True))
        layout = _VARLEN if varlen else _DENSE
        for i, (name, x) in enumerate(zip(names, (q, k, v))):
            if i > 0 and self.block_table is not None:
                _args.ndim(x, name, 4, "(num_blocks, page_block_size, nheads_k, headdim) with block_table")
            else:
                _args.ndim(x, name, 3 if varlen else 4, layout)
            _args.head_dim(x, name)
        _same_head_dim(k, names[1], int(q.shape[-1]), f"the head_dim of {names[0]}")
        self.renames = dict(zip(("q", "k", "v"), names))  # the library's names -> the caller's
        self.varlen = varlen
        if varlen:
            _args.tensor(cu_seqlens_q, "cu_seqlens_q", self.kind)
            _args.tensor(cu_seqlens_k, "cu_seqlens_k", self.kind)
        contiguous = _args.last_dim_contiguous
        self.cu_seqlens_q, self.cu_seqlens_k = contiguous(cu_seqlens_q), contiguous(cu_seqlens_k)
        seqlen_rule = "must be >= 0 (0 derives it from cu_seqlens on the host)"
        self.max_seqlen_q = _args.optional_integer(max_seqlen_q, "max_seqlen_q", 0, rule=seqlen_rule)
        self.max_seqlen_k = _args.optional_integer(max_seqlen_k, "max_seqlen_k", 0, rule=seqlen_rule)
        self.seqused_k = contiguous(_args.tensor(seqused_k, "seqused_k", self.kind, optional=True))
        self.alibi_slopes = contiguous(_args.tensor(alibi_slopes, "alibi_slopes", self.kind, optional=True))
        self.dropout_p = _args.real(dropout_p, "dropout_p")
        self.head_dim, self.head_dim_v = int(q.shape[-1]), int(v.shape[-1])
        self.scale = _default_scale(softmax_scale, self.head_dim)
        self.causal = _args.flag(causal, "causal")
        self.window = _args.window(window_size)
        self.softcap = _args.real(softcap, "softcap")
        self.deterministic = _args.flag(deterministic, "deterministic")
        self.num_splits = _args.integer(num_splits, "num_splits", rule="must be >= 0 (0 = the library chooses)")
        # As flash_attn: strided last dims are copied (autograd flows through the copy).
        self.q, self.k, self.v = (_args.last_dim_contiguous(x) for x in (q, k, v))

        if self.block_table is not None and self.dropout_p > 0:
            raise UnsupportedError("argument 'dropout_p': dropout is for training, and a paged k/v (block_table) "
                                   "has no backward; use dropout_p=0.0", "dropout_p", "unsupported")

    def options(self) -> dict:
        options = dict(cu_seqlens_q=self.cu_seqlens_q, cu_seqlens_k=self.cu_seqlens_k, seqused_k=self.seqused_k,
                       max_seqlen_q=self.max_seqlen_q, max_seqlen_k=self.max_seqlen_k, softmax_scale=self.scale,
                       causal=self.causal, window_size=self.window, softcap=self.softcap,
                       alibi_slopes=self.alibi_slopes, dropout_p=self.dropout_p, num_splits=self.num_splits)
        if self.block_table is not None:
            options["block_table"] = self.block_table
        for name, descale in zip(("q_descale", "k_descale", "v_descale"), self.descales):
            if descale is not None:
                options[name] = descale
        return options


def _descales(kind: str, q_descale: Any, k_descale: Any, v_descale: Any) -> Tuple[Any, Any, Any]:
    """The fp8 descales: torch tensors (float32 (batch, nheads_k); the library checks the rest), or
    None. numpy has no fp8 dtype, so a descale with numpy arrays is refused here, by name."""
    descales = (q_descale, k_descale, v_descale)
    for name, descale in zip(("q_descale", "k_descale", "v_descale"), descales):
        if descale is not None and kind == "numpy":
            raise _args.type_error(name, "is for float8_e4m3fn torch tensors (numpy has no fp8 dtype, so fp8 "
                                   "attention takes torch tensors)", descale)
        _args.tensor(descale, name, kind, optional=True)
    return descales


def _check_fp8_no_grad(q: Array, k: Array, v: Array) -> None:
    """fp8 attention is forward-only, as FlashAttention-3's: a call that would need gradients fails
    by name instead of returning an output autograd cannot differentiate."""
    import torch

    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise UnsupportedError("argument 'q': float8_e4m3fn attention has no backward (as in FlashAttention-3); "
                               "call under torch.no_grad() / torch.inference_mode(), or detach q, k and v", "q",
                               "unsupported")


def _run(call: _Call, *, differentiable: bool = True) -> Tuple[Array, Array, Any]:
    """(out, softmax_lse, rng_state) of a checked call: pads odd head dims and slices back.
    rng_state: a CPU int64 tensor [seed, offset] (torch) or a (seed, offset) tuple (numpy)."""
    qp, kp, vp = _pad_head_dim(call.q, "q"), _pad_head_dim(call.k, "k"), _pad_head_dim(call.v, "v")
    with _caller_names(call.renames, call.kind):
        if call.kind == "torch":
            from . import torch_ops

            if call.fp8:
                _check_fp8_no_grad(call.q, call.k, call.v)
            if call.fp8 or any(d is not None for d in call.descales):
                differentiable = False  # (descales without fp8 inputs: the library names the descale)
            if call.block_table is not None:
                import torch

                if torch.is_grad_enabled() and any(t.requires_grad for t in (call.q, call.k, call.v)):
                    raise UnsupportedError("argument 'block_table': a paged k/v has no backward; call under "
                                           "torch.no_grad() / torch.inference_mode(), or detach q, k and v",
                                           "block_table", "unsupported")
                differentiable = False
            if differentiable:
                out, lse, rng_state = torch_ops.attention(qp, kp, vp, deterministic=call.deterministic,
                                                          **call.options())
            else:
                out, lse, rng_state = torch_ops.attention_no_grad(qp, kp, vp, **call.options())
        else:
            from . import numpy_api

            out, lse, rng_state = numpy_api.fwd(qp, kp, vp, **call.options())
    if out.shape[-1] != call.head_dim_v:
        out = out[..., :call.head_dim_v]
    return out, lse, rng_state


def _empty_like_probs(q: Array) -> Array:
    """flash_attn's S_dmask when no probabilities are returned: an empty (0,) tensor of q's dtype."""
    if _is_torch(q):
        import torch

        return torch.empty((0,), dtype=q.dtype, device=q.device)
    import numpy as np

    return np.empty((0,), dtype=q.dtype)


def _attention(q: Array, k: Array, v: Array, *, return_attn_probs: Any = False, **kwargs: Any) -> Any:
    """The dense/varlen core of flash_attn's functions: out, or (out, softmax_lse, S_dmask)."""
    call = _Call(q, k, v, **kwargs)
    return_attn_probs = _args.flag(return_attn_probs, "return_attn_probs")
    out, lse, rng_state = _run(call)
    if not return_attn_probs:
        return out
    if call.dropout_p > 0:  # as flash_attn: the probabilities only come back with dropout on
        s_dmask = _dropout_encoded_probs(call, rng_state)
    else:
        s_dmask = _empty_like_probs(call.q)
    return out, lse, s_dmask


def _to_host_list(x: Optional[Array]) -> Optional[list]:
    if x is None:
        return None
    return [int(v) for v in x.tolist()]


def _dropout_encoded_probs(call: _Call, rng_state: Any) -> Array:
    """flash_attn's S_dmask: the attention probabilities (batch, nheads, seqlen_q_rounded,
    seqlen_k_rounded), seqlens rounded up to multiples of 128 as flash_attn allocates it, negated
    where dropout dropped the weight, zero outside the score matrix (varlen: each sequence in the
    top-left corner of its slice). Recomputed naively (O(seqlen^2) memory; reads cu_seqlens on the
    host): a testing aid, as in flash_attn."""
    from . import reference
    from .numpy_api import dropout_mask

    q, k, v = call.q, call.k, call.v
    torch_path = call.kind == "torch"
    seed, offset = (int(x) for x in (rng_state.tolist() if torch_path else rng_state))
    if call.varlen:
        cu_q, cu_k = _to_host_list(call.cu_seqlens_q), _to_host_list(call.cu_seqlens_k)
        used_k = _to_host_list(call.seqused_k)
        batch = len(cu_q) - 1
        lens_q = [cu_q[b + 1] - cu_q[b] for b in range(batch)]
        lens_k = [cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b] for b in range(batch)]
        seqlen_q = max([call.max_seqlen_q] + lens_q)
        seqlen_k = max([call.max_seqlen_k] + lens_k)
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    heads = q.shape[-2]
    keep = dropout_mask(batch, heads, seqlen_q, seqlen_k, call.dropout_p, seed, offset).astype(bool)
    shape = (batch, heads, _round_up(seqlen_q, 128), _round_up(seqlen_k, 128))
    if torch_path:
        import torch

        keep_t = torch.from_numpy(keep).to(q.device)
        q32, k32, v32 = (t.detach().float() for t in (q, k, v))
        result = torch.zeros(shape, dtype=torch.float32, device=q.device)
        sign = torch.where(keep_t, 1.0, -1.0)
    else:
        import numpy as np

        q32, k32, v32 = (np.asarray(t, dtype=np.float32) for t in (q, k, v))
        result = np.zeros(shape, dtype=np.float32)
        sign = np.where(keep, 1.0, -1.0).astype(np.float32)
    options = dict(softmax_scale=call.scale, causal=call.causal, window_size=call.window, softcap=call.softcap)
    slopes_all = call.alibi_slopes
    if slopes_all is not None:
        slopes_all = slopes_all.float() if torch_path else np.asarray(slopes_all, dtype=np.float32)
    for b in range(batch):
        if call.varlen:
            q_b = q32[cu_q[b]:cu_q[b + 1]][None]
            k_b = k32[cu_k[b]:cu_k[b] + lens_k[b]][None]
            v_b = v32[cu_k[b]:cu_k[b] + lens_k[b]][None]
        else:
            q_b, k_b, v_b = q32[b:b + 1], k32[b:b + 1], v32[b:b + 1]
        slopes = slopes_all
        if slopes_all is not None and slopes_all.ndim == 2:
            slopes = slopes_all[b]
        _, _, probs = reference.attention_reference(q_b, k_b, v_b, alibi_slopes=slopes, **options)
        sq, sk = probs.shape[-2], probs.shape[-1]
        result[b, :, :sq, :sk] = probs[0] * sign[b, :, :sq, :sk]
    return result.to(q.dtype) if torch_path else result.astype(q.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# flash_attn's functions
# ---------------------------------------------------------------------------------------------
_COMMON_ARGS = """
        dropout_p: float in [0, 1). Probability of dropping an attention weight (kept weights are
            scaled by 1 / (1 - dropout_p)). Set it to 0.0 in evaluation.
        softmax_scale: float. Scaling of Q @ K^T before the softmax; default 1 / sqrt(headdim).
        causal: bool. Causal mask aligned to the bottom-right corner of the score matrix: query i
            sees key j iff j <= i + seqlen_k - seqlen_q (with seqlen_q > seqlen_k the first rows see
            no key and give output 0).
        window_size: (left, right). Sliding window around that same diagonal: query i sees keys j in
            [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right]; -1 = unbounded on that
            side. (-1, -1) is no window; causal=True is right = 0.
        softcap: float >= 0. When > 0, each logit s becomes softcap * tanh(s / softcap).
        alibi_slopes: float32 (nheads,) or (batch, nheads). Adds -slope * |i + seqlen_k - seqlen_q - j|
            to the logit of query i and key j.
        deterministic: bool. Bitwise reproducible backward (no floating-point atomics); the forward
            is always deterministic.
        return_attn_probs: bool. Also return softmax_lse and S_dmask (see Returns). S_dmask is a
            testing aid, recomputed naively (O(seqlen_q * seqlen_k) memory).
        num_splits: int, keyword-only (not in flash_attn). Split the keys into this many chunks
            (split-KV); 1 = off, 0 = the library chooses. The result is the same attention.
"""

_RETURNS = """
    Returns:
        out: {out_shape}, q's dtype.
        With return_attn_probs=True, the tuple (out, softmax_lse, S_dmask):
        softmax_lse: float32 {lse_shape}, the natural log of each row's softmax denominator
            (-inf for a row that sees no key).
        S_dmask: (batch, nheads, seqlen_q_rounded, seqlen_k_rounded), q's dtype, seqlens rounded up
            to multiples of 128: the attention probabilities, negative where dropout dropped the
            weight, 0 outside the score matrix; an empty (0,) tensor when dropout_p == 0, as
            flash_attn returns.
"""


def flash_attn_func(q: Array, k: Array, v: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Window = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                    return_attn_probs: bool = False, *, num_splits: int = 1) -> Any:
    return _attention(q, k, v, varlen=False, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs, num_splits=num_splits)


flash_attn_func.__doc__ = """Exact attention softmax(Q @ K^T * scale) @ V, with GQA/MQA.

    Arguments:
        q: (batch, seqlen_q, nheads, headdim), float16/bfloat16/float32 (float64 is computed in
            float32).
        k: (batch, seqlen_k, nheads_k, headdim), q's dtype; nheads % nheads_k == 0.
        v: (batch, seqlen_k, nheads_k, headdim_v), q's dtype.""" + _COMMON_ARGS + _RETURNS.format(
    out_shape="(batch, seqlen_q, nheads, headdim_v)", lse_shape="(batch, nheads, seqlen_q)")


def flash_attn_qkvpacked_func(qkv: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Window = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                              return_attn_probs: bool = False, *, num_splits: int = 1) -> Any:
    _check_packed(qkv, "qkv", 5, 2, 3, "(batch, seqlen, 3, nheads, headdim)")
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], names=("qkv", "qkv", "qkv"), varlen=False,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      return_attn_probs=return_attn_probs, num_splits=num_splits)


flash_attn_qkvpacked_func.__doc__ = """flash_attn_func with q, k, v stacked in one tensor (self-attention;
    the gradient comes back as one dqkv).

    Arguments:
        qkv: (batch, seqlen, 3, nheads, headdim).""" + _COMMON_ARGS + _RETURNS.format(
    out_shape="(batch, seqlen, nheads, headdim)", lse_shape="(batch, nheads, seqlen)")


def flash_attn_kvpacked_func(q: Array, kv: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                             causal: bool = False, window_size: Window = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                             return_attn_probs: bool = False, *, num_splits: int = 1) -> Any:
    _args.first_tensor(q, "q")
    _check_packed(kv, "kv", 5, 2, 2, "(batch, seqlen_k, 2, nheads_k, headdim)")
    return _attention(q, kv[:, :, 0], kv[:, :, 1], names=("q", "kv", "kv"), varlen=False, dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic, return_attn_probs=return_attn_probs,
                      num_splits=num_splits)


flash_attn_kvpacked_func.__doc__ = """flash_attn_func with k and v stacked in one tensor.

    Arguments:
        q: (batch, seqlen_q, nheads, headdim).
        kv: (batch, seqlen_k, 2, nheads_k, headdim), q's dtype.""" + _COMMON_ARGS + _RETURNS.format(
    out_shape="(batch, seqlen_q, nheads, headdim)", lse_shape="(batch, nheads, seqlen_q)")


def _check_packed(x: Any, name: str, ndim: int, axis: int, count: int, layout: str) -> None:
    _args.tensor(x, name)
    _args.ndim(x, name, ndim, layout)
    _args.dim(x, name, axis, count, "the number of packed tensors")


_VARLEN_ARGS = """
        cu_seqlens_q: int32 (batch + 1,). Offsets of the sequences in q: sequence b is
            q[cu_seqlens_q[b]:cu_seqlens_q[b + 1]]. Rows past cu_seqlens_q[-1] belong to no
            sequence: their output is 0 and their softmax_lse -inf.
        cu_seqlens_k: int32 (batch + 1,). The same for k and v.
        max_seqlen_q: int. The longest query sequence (an upper bound is fine; 0 derives it from a
            host cu_seqlens_q).
        max_seqlen_k: int. The longest key sequence (likewise)."""


def flash_attn_varlen_func(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Window = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: Optional[Array] = None, *,
                           seqused_k: Optional[Array] = None, num_splits: int = 1) -> Any:
    return _attention(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                      max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                      block_table=block_table,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      return_attn_probs=return_attn_probs, num_splits=num_splits)


flash_attn_varlen_func.__doc__ = """Attention over packed sequences of different lengths (no padding):
    each sequence attends only to its own keys; causal and window apply per sequence.

    Arguments:
        q: (total_q, nheads, headdim), the query sequences one after another.
        k: (total_k, nheads_k, headdim), q's dtype.
        v: (total_k, nheads_k, headdim_v), q's dtype.""" + _VARLEN_ARGS + _COMMON_ARGS + """
        block_table: int32 (batch, max_num_blocks_per_seq), optional: k and v are then paged caches
            (num_blocks, page_block_size, nheads_k, headdim[_v]) and sequence b's keys are the first
            cu_seqlens_k[b + 1] - cu_seqlens_k[b] (or seqused_k[b]) positions of the pages in row b,
            as serving engines call it for mixed prefill and decode batches. Forward only (no
            backward, no dropout).
        seqused_k: int32 (batch,), keyword-only. Sequence b uses only its first seqused_k[b] keys.
""" + _RETURNS.format(out_shape="(total_q, nheads, headdim_v)", lse_shape="(nheads, total_q)")


def flash_attn_varlen_qkvpacked_func(qkv: Array, cu_seqlens: Array, max_seqlen: int, dropout_p: float = 0.0,
                                     softmax_scale: Optional[float] = None, causal: bool = False,
                                     window_size: Window = (-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                                     return_attn_probs: bool = False, *, num_splits: int = 1) -> Any:
    _check_packed(qkv, "qkv", 4, 1, 3, "(total, 3, nheads, headdim)")
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], names=("qkv", "qkv", "qkv"), varlen=True,
                      cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, max_seqlen_q=max_seqlen,
                      max_seqlen_k=max_seqlen, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, return_attn_probs=return_attn_probs, num_splits=num_splits)


flash_attn_varlen_qkvpacked_func.__doc__ = """flash_attn_varlen_func with q, k, v stacked in one tensor.

    Arguments:
        qkv: (total, 3, nheads, headdim).
        cu_seqlens: int32 (batch + 1,), offsets of the sequences (for q, k and v alike).
        max_seqlen: int, the longest sequence.""" + _COMMON_ARGS + _RETURNS.format(
    out_shape="(total, nheads, headdim)", lse_shape="(nheads, total)")


def flash_attn_varlen_kvpacked_func(q: Array, kv: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                                    max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                                    softmax_scale: Optional[float] = None, causal: bool = False,
                                    window_size: Window = (-1, -1), softcap: float = 0.0,
                                    alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                                    return_attn_probs: bool = False, *, num_splits: int = 1) -> Any:
    _args.first_tensor(q, "q")
    _check_packed(kv, "kv", 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
    return _attention(q, kv[:, 0], kv[:, 1], names=("q", "kv", "kv"), varlen=True, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      return_attn_probs=return_attn_probs, num_splits=num_splits)


flash_attn_varlen_kvpacked_func.__doc__ = """flash_attn_varlen_func with k and v stacked in one tensor.

    Arguments:
        q: (total_q, nheads, headdim).
        kv: (total_k, 2, nheads_k, headdim), q's dtype.""" + _VARLEN_ARGS + _COMMON_ARGS + _RETURNS.format(
    out_shape="(total_q, nheads, headdim)", lse_shape="(nheads, total_q)")


# ---------------------------------------------------------------------------------------------
# KV cache
# ---------------------------------------------------------------------------------------------
def _kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array], v: Optional[Array], *,
             rotary_cos: Any, rotary_sin: Any, cache_seqlens: Any, cache_batch_idx: Any, cache_leftpad: Any,
             block_table: Any,
             softmax_scale: Any, causal: Any, window_size: Any, softcap: Any, rotary_interleaved: Any,
             alibi_slopes: Any, num_splits: Any, block_table_name: str = "block_table", cu_seqlens_q: Any = None,
             max_seqlen_q: Any = None, q_descale: Any = None, k_descale: Any = None,
             v_descale: Any = None) -> Tuple[Array, Array]:
    """(out, softmax_lse) of a checked KV-cache call; appends k/v into the caches in place."""
    kind = _args.first_tensor(q, "q")
    descales = _descales(kind, q_descale, k_descale, v_descale)
    varlen = _args.tensor(cu_seqlens_q, "cu_seqlens_q", kind, optional=True) is not None
    _args.ndim(q, "q", 3 if varlen else 4, _VARLEN if varlen else _DENSE)
    batch = int(cu_seqlens_q.shape[0]) - 1 if varlen else int(q.shape[0])
    head_dim = _args.head_dim(q, "q")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        _args.tensor(x, name, kind)
        _args.ndim(x, name, 4, "(batch_cache, seqlen_cache, nheads_k, headdim) or paged "
                               "(num_blocks, page_block_size, nheads_k, headdim)")
        _args.head_dim(x, name)
    for name, x in (("k", k), ("v", v)):
        if _args.tensor(x, name, kind, optional=True) is not None:
            _args.ndim(x, name, 4, "(batch, seqlen_new, nheads_k, headdim)")
    if (k is None) != (v is None):
        missing, given = ("v", "k") if v is None else ("k", "v")
        raise _args.type_error(missing, f"must be given with '{given}' (new keys and values are appended together)",
                               None)
    for name, x in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin), ("cache_batch_idx", cache_batch_idx),
                    ("cache_leftpad", cache_leftpad), (block_table_name, block_table), ("alibi_slopes", alibi_slopes)):
        _args.tensor(x, name, kind, optional=True)
    if cache_seqlens is not None and _args.array_kind(cache_seqlens) is None:
        length = _args.integer(cache_seqlens, "cache_seqlens", 0,
                               rule="must be >= 0 (the tokens already in every cache row)")
        if kind == "torch":
            import torch

            cache_seqlens = torch.full((max(batch, 0),), length, dtype=torch.int32, device=q.device)
        else:
            import numpy as np

            cache_seqlens = np.full((max(batch, 0),), length, dtype=np.int32)
    else:
        _args.tensor(cache_seqlens, "cache_seqlens", kind, optional=True)
    head_dim_v = int(v_cache.shape[-1])
    _same_head_dim(k_cache, "k_cache", head_dim, "the head_dim of q")
    _same_head_dim(k, "k", head_dim, "the head_dim of q")
    _same_head_dim(v, "v", head_dim_v, "the head_dim_v of v_cache")
    # As flash_attn: strided last dims of everything but the caches (written in place) are copied.
    (q, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad, block_table, alibi_slopes,
     cu_seqlens_q) = (_args.last_dim_contiguous(x) for x in (q, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                                            cache_batch_idx, cache_leftpad, block_table,
                                                            alibi_slopes, cu_seqlens_q))
    options = dict(cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                   block_table=block_table,
                   rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                   rotary_interleaved=_args.flag(rotary_interleaved, "rotary_interleaved"),
                   softmax_scale=_default_scale(softmax_scale, head_dim), causal=_args.flag(causal, "causal"),
                   window_size=_args.window(window_size), softcap=_args.real(softcap, "softcap"),
                   alibi_slopes=alibi_slopes,
                   num_splits=_args.integer(num_splits, "num_splits", rule="must be >= 0 (0 = the library chooses)"),
                   cu_seqlens_q=cu_seqlens_q,
                   max_seqlen_q=_args.optional_integer(max_seqlen_q, "max_seqlen_q", 0,
                                                       rule="must be >= 0 (0 derives it from cu_seqlens_q)") or 0)
    for name, descale in zip(("q_descale", "k_descale", "v_descale"), descales):
        if descale is not None:
            options[name] = descale
    if kind == "numpy" and k is not None:
        for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not cache.flags.writeable:
                raise _args.value_error(name, "must be writable when k/v are appended into it", "a read-only array")
    # Odd head dims: the library works on zero-padded copies; appended keys are copied back below.
    k_cache_p, v_cache_p = _pad_head_dim(k_cache, "k_cache"), _pad_head_dim(v_cache, "v_cache")
    options["k_new"], options["v_new"] = _pad_head_dim(k, "k"), _pad_head_dim(v, "v")  # no dict.update: dynamo
    qp = _pad_head_dim(q, "q")
    with _caller_names({"k_new": "k", "v_new": "v", "block_table": block_table_name}, kind):
        if kind == "torch":
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
    return out, lse


def flash_attn_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                            v: Optional[Array] = None, rotary_cos: Optional[Array] = None,
                            rotary_sin: Optional[Array] = None, cache_seqlens: Optional[Union[int, Array]] = None,
                            cache_batch_idx: Optional[Array] = None, cache_leftpad: Optional[Array] = None,
                            block_table: Optional[Array] = None, softmax_scale: Optional[float] = None,
                            causal: bool = False, window_size: Window = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Optional[Array] = None,
                            num_splits: int = 0, return_softmax_lse: bool = False) -> Any:
    """Attention of q over a KV cache (decoding, chunked prefill), optionally appending new keys
    and values to the cache first, all in one call. Not differentiable.

    When k and v are given they are written into k_cache/v_cache *in place* at positions
    cache_seqlens[b], cache_seqlens[b] + 1, ... (the cache must have room), rotated first when
    rotary_cos/rotary_sin are given; q is rotated the same way (at positions cache_seqlens[b] + i
    when causal or windowed, at cache_seqlens[b] otherwise, as flash_attn does). Attention then
    covers the cache's first cache_seqlens[b] + seqlen_new keys. Masks are aligned to the
    bottom-right corner as in flash_attn_func (q's last row is the newest token).

    Arguments:
        q: (batch, seqlen_q, nheads, headdim).
        k_cache: (batch_cache, seqlen_cache, nheads_k, headdim), or with block_table a paged cache
            (num_blocks, page_block_size, nheads_k, headdim). Written only when k is given (a
            read-only array is fine otherwise).
        v_cache: like k_cache with headdim_v.
        k: (batch, seqlen_new, nheads_k, headdim), optional: new keys to append (with v).
        v: (batch, seqlen_new, nheads_k, headdim_v), optional.
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), optional: rotary embedding applied to
            k and q; it covers the first rotary_dim features.
        cache_seqlens: int, or int32 (batch,): the tokens already in each cache row. None: every
            slot of the cache is used.
        cache_batch_idx: int32 (batch,), optional: the cache row of each batch entry (default b).
        cache_leftpad: int32 (batch,), optional: the cache position where each sequence starts
            (left padding). Its keys are positions cache_leftpad[b] .. cache_seqlens[b] + seqlen_new - 1;
            rotary positions stay the cache positions, as in flash_attn.
        block_table: int32 (batch, max_num_blocks_per_seq), optional: the pages of each sequence in
            a paged cache.
        softmax_scale, causal, window_size, softcap, alibi_slopes: as in flash_attn_func.
        rotary_interleaved: bool. True: rotate pairs (0, 1), (2, 3), ... (GPT-J); False: pairs
            (i, i + rotary_dim / 2) (GPT-NeoX).
        num_splits: int. Split-KV chunks; 0 = the library chooses, 1 = no split.
        return_softmax_lse: bool. Also return softmax_lse.

    Returns:
        out: (batch, seqlen_q, nheads, headdim_v), or (out, softmax_lse (batch, nheads, seqlen_q),
        float32) with return_softmax_lse.
    """
    out, lse = _kvcache(q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                        cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                        block_table=block_table,
                        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                        rotary_interleaved=rotary_interleaved, alibi_slopes=alibi_slopes, num_splits=num_splits)
    return (out, lse) if _args.flag(return_softmax_lse, "return_softmax_lse") else out


# ---------------------------------------------------------------------------------------------
# FlashAttention-3's combine
# ---------------------------------------------------------------------------------------------
def flash_attn_combine(out_partial: Array, lse_partial: Array, out: Optional[Array] = None,
                       out_dtype: Any = None) -> Tuple[Array, Array]:
    """FlashAttention-3's combine: merges split-KV partial results by their log-sum-exp, i.e.
    attention over the union of the key chunks each partial result saw.

    Arguments:
        out_partial: float32 (num_splits, batch, seqlen, nheads, headdim) or
            (num_splits, total_q, nheads, headdim).
        lse_partial: float32 (num_splits, batch, seqlen, nheads) or (num_splits, total_q, nheads):
            the partial results' softmax_lse, transposed to put nheads last (FlashAttention-3's
            layout).
        out: optional output (batch, seqlen, nheads, headdim) or (total_q, nheads, headdim) to
            write into; returned.
        out_dtype: dtype of the output when out is not given (default: out_partial's).

    Returns:
        (out, softmax_lse) with softmax_lse float32 (batch, seqlen, nheads) or (total_q, nheads)
        (a transposed view of the library's (batch, nheads, seqlen) layout, as in FlashAttention-3).
    """
    kind = _args.first_tensor(out_partial, "out_partial")
    _args.tensor(lse_partial, "lse_partial", kind)
    _args.tensor(out, "out", kind, optional=True)
    if out_partial.ndim not in (4, 5):
        raise _args.value_error("out_partial", "ndim must be 5 (num_splits, batch, seqlen, nheads, headdim) "
                                "or 4 (num_splits, total_q, nheads, headdim)",
                                f"{out_partial.ndim} (shape {list(out_partial.shape)})")
    _args.ndim(lse_partial, "lse_partial", out_partial.ndim - 1, "(out_partial's shape without headdim)")
    head_dim = _args.head_dim(out_partial, "out_partial")
    partial = _pad_head_dim(out_partial, "out_partial")
    lse_lib = lse_partial.swapaxes(-1, -2)  # the library's (splits, ..., heads, seqlen)
    dtype = out_dtype if out_dtype is not None else (out.dtype if out is not None else None)
    if kind == "torch":
        import torch

        from . import torch_ops

        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise _args.type_error("out_dtype", "must be a torch.dtype or None", dtype)
        lse_lib = lse_lib if lse_lib.stride(-1) == 1 else lse_lib.contiguous()
        result, lse = torch_ops.combine_partials(partial, lse_lib, dtype)
    else:
        import numpy as np

        from . import numpy_api

        lse_lib = np.ascontiguousarray(lse_lib)
        result, lse = numpy_api.combine(partial, lse_lib, dtype)
    if result.shape[-1] != head_dim:
        result = result[..., :head_dim]
    if out is not None:
        if tuple(out.shape) != tuple(result.shape):
            raise _args.value_error("out", f"shape must be {list(result.shape)}", str(list(out.shape)))
        out[...] = result
        result = out
    return result, lse.swapaxes(-1, -2)


# ---------------------------------------------------------------------------------------------
# flash_attn 2.7's private entries, as ring-attention libraries call them
# ---------------------------------------------------------------------------------------------
def _rng_state_tensor(rng_state: Any, kind: str) -> Any:
    if kind == "torch":
        return rng_state  # already a CPU int64 tensor [seed, offset]
    import numpy as np

    return np.asarray(rng_state, dtype=np.int64)


def _raw_forward(call: _Call, return_softmax: Any) -> Tuple[Array, Array, Array, Array]:
    out, lse, rng_state = _run(call, differentiable=False)
    if _args.flag(return_softmax, "return_softmax") and call.dropout_p > 0:
        s_dmask = _dropout_encoded_probs(call, rng_state)
    else:
        s_dmask = _empty_like_probs(call.q)
    return out, lse, s_dmask, _rng_state_tensor(rng_state, call.kind)


def _flash_attn_forward(q: Array, k: Array, v: Array, dropout_p: float, softmax_scale: Optional[float],
                        causal: bool, window_size_left: int, window_size_right: int, softcap: float,
                        alibi_slopes: Optional[Array], return_softmax: bool) -> Tuple[Array, Array, Array, Array]:
    """flash_attn 2.7's raw forward (no autograd), as ring/context-parallel attention libraries call it.

    Arguments:
        q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim[_v]).
        dropout_p: float in [0, 1), probability of dropping an attention weight.
        softmax_scale: float (None: 1 / sqrt(headdim)).
        causal: bool, mask aligned to the bottom-right corner (see flash_attn_func).
        window_size_left, window_size_right: int, the sliding window's sides; -1 = unbounded.
        softcap: float >= 0, 0 = off.
        alibi_slopes: float32 (nheads,) or (batch, nheads), or None.
        return_softmax: bool, return S_dmask (with dropout only, as flash_attn).

    Returns:
        (out, softmax_lse, S_dmask, rng_state): out (batch, seqlen_q, nheads, headdim_v) with the
        caller's head dims (flash_attn 2.7 returns it padded to a multiple of 8 when the caller
        padded q); softmax_lse float32 (batch, nheads, seqlen_q); S_dmask as flash_attn_func's
        (empty without dropout or return_softmax); rng_state int64 (2,) [seed, offset] on the host,
        to pass to _flash_attn_backward.
    """
    call = _Call(q, k, v, varlen=False, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                 window_size=(window_size_left, window_size_right), softcap=softcap, alibi_slopes=alibi_slopes)
    return _raw_forward(call, return_softmax)


def _flash_attn_varlen_forward(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                               max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
                               softmax_scale: Optional[float], causal: bool, window_size_left: int = -1,
                               window_size_right: int = -1, softcap: float = 0.0,
                               alibi_slopes: Optional[Array] = None, return_softmax: bool = False,
                               block_table: Optional[Array] = None, leftpad_k: Optional[Array] = None,
                               seqused_k: Optional[Array] = None) -> Tuple[Array, Array, Array, Array]:
    """flash_attn 2.7's raw varlen forward (no autograd).

    Arguments:
        q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim[_v]).
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,), the sequences' offsets.
        max_seqlen_q, max_seqlen_k: int, the longest sequences.
        dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
        alibi_slopes, return_softmax: as _flash_attn_forward.
        block_table: int32 (batch, max_num_blocks_per_seq), optional: k and v are paged, as in
            flash_attn_varlen_func (no dropout).
        leftpad_k: not supported yet (UnsupportedError when given).
        seqused_k: int32 (batch,), optional: keys used per sequence.

    Returns:
        (out (total_q, nheads, headdim_v), softmax_lse float32 (nheads, total_q), S_dmask, rng_state).
    """
    if leftpad_k is not None:
        raise UnsupportedError("argument 'leftpad_k': not supported by flashattn yet", "leftpad_k", "unsupported")
    call = _Call(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, dropout_p=dropout_p,
                 softmax_scale=softmax_scale, causal=causal, window_size=(window_size_left, window_size_right),
                 softcap=softcap, alibi_slopes=alibi_slopes, block_table=block_table)
    return _raw_forward(call, return_softmax)


def _raw_backward(call: _Call, dout: Any, out: Any, softmax_lse: Any, dq: Any, dk: Any, dv: Any,
                  rng_state: Any) -> Array:
    """Gradients written into dq/dk/dv (when given); returns softmax_d = rowsum(dout * out) in
    flash_attn's layout."""
    kind = call.kind
    _args.tensor(dout, "dout", kind)
    _args.tensor(out, "out", kind)
    _args.tensor(softmax_lse, "softmax_lse", kind)
    for name, g, like in (("dq", dq, call.q), ("dk", dk, call.k), ("dv", dv, call.v)):
        if _args.tensor(g, name, kind, optional=True) is not None and tuple(g.shape) != tuple(like.shape):
            raise _args.value_error(name, f"shape must equal {name[1]}'s {list(like.shape)}", str(list(g.shape)))
    if call.dropout_p > 0 and rng_state is None:
        raise _args.type_error("rng_state", "must be the forward's rng_state when dropout_p > 0", None)
    seed_offset = (0, 0)
    if rng_state is not None:
        try:
            seed_offset = tuple(int(x) for x in (rng_state.tolist() if hasattr(rng_state, "tolist") else rng_state))
        except (TypeError, ValueError):
            raise _args.type_error("rng_state", "must be the forward's rng_state [seed, offset]", rng_state) from None
        if len(seed_offset) != 2:
            raise _args.value_error("rng_state", "must be the forward's rng_state [seed, offset]",
                                    f"{len(seed_offset)} values")
    for name, x in (("out", out), ("dout", dout)):
        _same_head_dim(x, name, call.head_dim_v, "the head_dim of v")
    dout, out = _args.last_dim_contiguous(dout), _args.last_dim_contiguous(out)
    qp, kp, vp = _pad_head_dim(call.q, "q"), _pad_head_dim(call.k, "k"), _pad_head_dim(call.v, "v")
    outp, doutp = _pad_head_dim(out, "out"), _pad_head_dim(dout, "dout")
    window_left, window_right = call.window
    with _caller_names(call.renames, kind):
        if kind == "torch":
            import torch

            rng = torch.tensor(seed_offset, dtype=torch.int64)
            with torch.no_grad():
                grads = torch.ops.flashattn.bwd(
                    doutp, qp, kp, vp, outp, softmax_lse, call.cu_seqlens_q, call.cu_seqlens_k, call.seqused_k,
                    call.max_seqlen_q, call.max_seqlen_k, call.scale, call.causal, window_left, window_right,
                    call.softcap, call.alibi_slopes, call.dropout_p, rng, call.deterministic)
        else:
            from . import numpy_api

            grads = numpy_api.bwd(doutp, qp, kp, vp, outp, softmax_lse, rng_state=seed_offset, **{
                name: value for name, value in call.options().items() if name != "num_splits"},
                deterministic=call.deterministic)
    for target, grad, like in zip((dq, dk, dv), grads, (call.q, call.k, call.v)):
        if target is not None:
            target[...] = grad[..., :like.shape[-1]]
    return _softmax_d(call, dout, out)


def _softmax_d(call: _Call, dout: Array, out: Array) -> Array:
    """rowsum(dout * out) in float32, laid out as flash_attn's backward returns it: dense
    (batch, nheads, seqlen_q rounded up to 128); varlen (nheads, total_q + 128 * batch) with the row
    i of sequence b at column cu_seqlens_q[b] + 128 * b + i. Zero elsewhere."""
    if call.kind == "torch":
        import torch

        d = (dout.detach().float() * out.detach().float()).sum(-1)
        if not call.varlen:
            b, s, h = d.shape
            result = torch.zeros((b, h, _round_up(s, 128)), dtype=torch.float32, device=d.device)
            result[:, :, :s] = d.permute(0, 2, 1)
            return result
        cu = call.cu_seqlens_q.to(device=d.device, dtype=torch.int64)
        batch, total = cu.numel() - 1, d.shape[0]
        rows = torch.arange(total, device=d.device)
        seq = torch.searchsorted(cu[1:], rows, right=True)
        owned = seq < batch  # rows past cu_seqlens_q[-1] have no column
        result = torch.zeros((d.shape[1], total + 128 * batch), dtype=torch.float32, device=d.device)
        result[:, (rows + 128 * seq)[owned]] = d[owned].t()
        return result
    import numpy as np

    d = (np.asarray(dout, dtype=np.float32) * np.asarray(out, dtype=np.float32)).sum(-1)
    if not call.varlen:
        b, s, h = d.shape
        result = np.zeros((b, h, _round_up(s, 128)), dtype=np.float32)
        result[:, :, :s] = d.transpose(0, 2, 1)
        return result
    cu = np.asarray(call.cu_seqlens_q, dtype=np.int64)
    batch, total = cu.shape[0] - 1, d.shape[0]
    rows = np.arange(total)
    seq = np.searchsorted(cu[1:], rows, side="right")
    owned = seq < batch
    result = np.zeros((d.shape[1], total + 128 * batch), dtype=np.float32)
    result[:, (rows + 128 * seq)[owned]] = d[owned].T
    return result


def _flash_attn_backward(dout: Array, q: Array, k: Array, v: Array, out: Array, softmax_lse: Array,
                         dq: Optional[Array], dk: Optional[Array], dv: Optional[Array], dropout_p: float,
                         softmax_scale: Optional[float], causal: bool, window_size_left: int,
                         window_size_right: int, softcap: float, alibi_slopes: Optional[Array],
                         deterministic: bool, rng_state: Optional[Array] = None) -> Array:
    """flash_attn 2.7's raw backward: writes the gradients into dq, dk, dv and returns softmax_d.

    Arguments:
        dout: the gradient of out, out's shape.
        q, k, v: the forward's inputs.
        out, softmax_lse: the forward's outputs.
        dq, dk, dv: arrays of q's, k's, v's shapes that receive the gradients (None skips one).
        dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
        alibi_slopes: the forward's (as _flash_attn_forward).
        deterministic: bool, bitwise reproducible gradients.
        rng_state: the forward's rng_state (needed when dropout_p > 0).

    Returns:
        softmax_d: float32 (batch, nheads, seqlen_q rounded up to 128), the row sums of
        dout * out (0 past seqlen_q), as flash_attn returns it.
    """
    call = _Call(q, k, v, varlen=False, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                 window_size=(window_size_left, window_size_right), softcap=softcap, alibi_slopes=alibi_slopes,
                 deterministic=deterministic)
    return _raw_backward(call, dout, out, softmax_lse, dq, dk, dv, rng_state)


def _flash_attn_varlen_backward(dout: Array, q: Array, k: Array, v: Array, out: Array, softmax_lse: Array,
                                dq: Optional[Array], dk: Optional[Array], dv: Optional[Array],
                                cu_seqlens_q: Array, cu_seqlens_k: Array, max_seqlen_q: int, max_seqlen_k: int,
                                dropout_p: float, softmax_scale: Optional[float], causal: bool,
                                window_size_left: int, window_size_right: int, softcap: float,
                                alibi_slopes: Optional[Array], deterministic: bool,
                                rng_state: Optional[Array] = None) -> Array:
    """flash_attn 2.7's raw varlen backward: writes the gradients into dq, dk, dv.

    Arguments:
        dout: the gradient of out, (total_q, nheads, headdim_v).
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: the forward's inputs.
        out, softmax_lse: the forward's outputs.
        dq, dk, dv: arrays of q's, k's, v's shapes that receive the gradients (None skips one).
        dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
        alibi_slopes: the forward's.
        deterministic: bool, bitwise reproducible gradients.
        rng_state: the forward's rng_state (needed when dropout_p > 0).

    Returns:
        softmax_d: float32 (nheads, total_q + 128 * batch), the row sums of dout * out, row i of
        sequence b at column cu_seqlens_q[b] + 128 * b + i (flash_attn's layout), 0 elsewhere.
    """
    call = _Call(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, dropout_p=dropout_p,
                 softmax_scale=softmax_scale, causal=causal, window_size=(window_size_left, window_size_right),
                 softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic)
    return _raw_backward(call, dout, out, softmax_lse, dq, dk, dv, rng_state)


__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
    "flash_attn_combine",
]
