"""torch integration: custom ops (torch.library) with fake implementations, and the
autograd.Functions that flashattn.flash_attn_* use for torch tensors.

Importing this module imports torch; the package itself does not (it imports this on the first
call with a torch tensor).

* Tensors reach the C++ library through DLPack: nothing here is compiled against torch, so one
  build of the extension serves every torch version.
* Outputs are allocated here with torch (its caching allocator, on the tensors' device) and the
  library runs on ``torch.cuda.current_stream()``; nothing reads device memory from the host, so
  calls can be captured in CUDA graphs.
* The ops ``flashattn::fwd``, ``flashattn::bwd``, ``flashattn::fwd_kvcache`` and
  ``flashattn::combine`` have fake (meta) implementations computing output shapes only, so
  ``torch.compile(fullgraph=True)`` traces through them.
* Dropout draws a 62-bit Philox seed from torch's CPU generator inside the op (so
  ``torch.manual_seed`` makes it reproducible and torch.compile does not bake it into the graph)
  and returns it as a CPU int64 tensor ``rng_state = [seed, offset]`` for the backward. A CUDA
  graph that captured a dropout call replays the same mask (the seed is a host value).
* float8_e4m3fn q, k, v (forward only, with optional float32 (batch, heads_k) descales) reach the
  library as uint8 views of their memory (``float8_views``): torch's DLPack export refuses float8.
  Their output is bfloat16.
* float64 tensors (CPU or CUDA) are computed in float32 (the C++ API has no float64) and the
  results cast back; this exists for torch.autograd.gradcheck on tiny inputs, whose tolerances must
  then be those of float32 arithmetic (see tests/python/test_torch.py).
"""
# No "from __future__ import annotations" here: torch.library.custom_op reads the type hints, and
# torch 2.4/2.5 cannot resolve string annotations such as "Tuple[Tensor, Tensor, Tensor]".
import contextlib
from typing import Any, ContextManager, List, Optional, Tuple

import torch
from torch import Tensor

if not hasattr(torch.library, "custom_op"):  # added in torch 2.4
    raise ImportError(f"flashattn needs torch >= 2.4 for torch tensors (torch.library.custom_op); found torch "
                      f"{torch.__version__} (pip install 'flashattn[torch]')")

from . import _ext
from ._errors import raise_for_status


def _stream(t: Tensor) -> int:
    """The raw cudaStream_t of torch's current stream on t's device (0 for host tensors)."""
    if t.device.type == "cuda":
        return torch.cuda.current_stream(t.device).cuda_stream
    return 0


# torch's caching allocator, as the library's workspace allocator for CUDA calls: (alloc(nbytes,
# stream) -> address, release(address)), both on the current device and ordered on the stream.
_TORCH_WORKSPACE = (getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None),
                    getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None))


def _workspace(t: Tensor) -> Optional[Tuple[Any, Any]]:
    """The scratch a CUDA call needs (the backward's dQ accumulator, split-KV partials) from torch's
    caching allocator, as FlashAttention allocates it: torch's memory statistics count it and its
    cache serves it. None (the library's own pool) for host tensors or a torch without the hooks."""
    if t.device.type != "cuda" or None in _TORCH_WORKSPACE:
        return None
    return _TORCH_WORKSPACE


def _on_device(t: Tensor) -> ContextManager:
    """Makes t's CUDA device current: torch exports CUDA tensors through DLPack only from the
    current device, and the library launches on the current device's stream."""
    if t.device.type == "cuda" and t.device.index is not None and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def _dl(t: Optional[Tensor]) -> Optional[Tensor]:
    """DLPack refuses tensors that require grad; the library only reads or writes their memory."""
    return None if t is None else t.detach()


def _compute(t: Optional[Tensor]) -> Optional[Tensor]:
    """float64 -> float32 (the library has no float64); other dtypes as they are."""
    if t is None:
        return None
    t = t.detach()
    return t.float() if t.dtype == torch.float64 else t


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def _is_fp8(t: Tensor) -> bool:
    return t.dtype == torch.float8_e4m3fn


def _float8_views(**tensors: Optional[Tensor]) -> Tuple[List[Optional[Tensor]], List[str]]:
    """The tensors with every float8 one as the uint8 view DLPack can carry (same memory), and the
    names of those: the extension reads their bytes as e4m3 (float8_views)."""
    views, names = [], []
    for name, t in tensors.items():
        if t is not None and _is_fp8(t):
            views.append(t.detach().view(torch.uint8))
            names.append(name)
        else:
            views.append(t)
    return views, names


def _out_dtype(q: Tensor) -> torch.dtype:
    """fp8 inputs write bfloat16 (as FlashAttention-3); float64 is computed (and written) in float32."""
    if _is_fp8(q):
        return torch.bfloat16
    return torch.float32 if q.dtype == torch.float64 else q.dtype


def _out_shape(q: Tensor, v: Tensor) -> List[int]:
    return list(q.shape[:-1]) + [v.shape[-1]]


def _lse_shape(q: Tensor, varlen: bool) -> List[int]:
    # dense (batch, heads_q, seqlen_q); varlen (heads_q, total_q)
    return [q.shape[1], q.shape[0]] if varlen else [q.shape[0], q.shape[2], q.shape[1]]


def _draw_rng_state(dropout_p: float) -> Tensor:
    if dropout_p > 0:
        # Drawn from the CPU generator: a host value, no device synchronisation.
        return torch.stack([torch.randint(0, 2**62, (), dtype=torch.int64), torch.zeros((), dtype=torch.int64)])
    return torch.zeros(2, dtype=torch.int64)


# What a direct call must ask torch. These are private functions; where this torch lacks one, every
# call goes through the op (slower, never wrong). Pre-dispatch modes (make_fx pre_dispatch) sit on a
# stack of their own in the torch versions that have one.
_dispatch_stack_len = getattr(torch._C, "_len_torch_dispatch_stack", None)
_pre_dispatch_stack_len = getattr(torch._ops, "_len_torch_dispatch_stack_pre_dispatch", None)
_function_mode_enabled = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_tracing_state = getattr(torch._C, "_get_tracing_state", None)
_profiler_enabled = getattr(torch.autograd, "_profiler_enabled", None)
_DIRECT_CALLS = None not in (_dispatch_stack_len, _function_mode_enabled, _functorch_active, _tracing_state,
                             _profiler_enabled)


def _no_modes() -> bool:
    # The dispatch stack's length counts the infra modes too (FakeTensorMode, proxy, functional).
    return (_dispatch_stack_len() == 0 and (_pre_dispatch_stack_len is None or _pre_dispatch_stack_len() == 0)
            and not _function_mode_enabled())


def _direct_call_ok(*tensors: Optional[Tensor]) -> bool:
    """True where calling an op through torch's dispatcher would only run its implementation: an
    eager call whose tensor arguments are all plain tensors, with no dispatch or function mode
    (FakeTensorMode, FlopCounterMode, a device context), no functorch transform (vmap, grad), no
    TorchScript or compiler tracing, no profiler recording ops, and no argument that needs an
    autograd record (the ops have no backward of their own: called, they raise on a backward
    through their outputs, where a direct call would give outputs silently cut from the graph).
    There the implementation is called directly: the custom op's Python dispatch layers cost more
    host time than the library call itself (docs/PERF.md, thirty-third session), which a step that
    synchronises (Transformers' flash-attention path at batch 1) or a small decode call pays in
    full. Everywhere else the op is called, so tracing, export, modes and profiles see it."""
    # is_compiling first: under torch.compile it is a constant, and nothing after it gets traced.
    return (_DIRECT_CALLS and not torch.compiler.is_compiling()
            and all(t is None or type(t) is Tensor for t in tensors) and _no_modes()
            and not _functorch_active() and not _tracing_state() and not _profiler_enabled()
            and (not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in tensors)))


def _bump_versions(*tensors: Tensor) -> None:
    """What the op does for the arguments it mutates: their version counters move, so autograd
    refuses a backward through a saved copy of the old contents (inference tensors have none)."""
    for t in tensors:
        if not t.is_inference():
            torch.autograd.graph.increment_version(t)


# ---------------------------------------------------------------------------------------------
# flashattn::fwd / flashattn::bwd
# ---------------------------------------------------------------------------------------------
def _fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
         seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
         window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[Tensor], dropout_p: float,
         num_splits: int, block_table: Optional[Tensor] = None, q_descale: Optional[Tensor] = None,
         k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """Forward attention: (out, softmax_lse, rng_state). Dense (batch, seqlen, heads, d) or varlen
    (total, heads, d) with int32 cu_seqlens; with block_table (varlen only) k and v are paged
    (num_blocks, page_size, heads_k, d). float8_e4m3fn q, k, v take float32 (batch, heads_k)
    descales and give a bfloat16 out."""
    varlen = cu_seqlens_q is not None
    fp8 = _is_fp8(q)
    qc, kc, vc = (_last_dim_contiguous(_compute(x)) for x in (q, k, v))
    out_dtype = _out_dtype(q)
    if varlen:
        # Rows past cu_seqlens_q[-1] belong to no sequence and are not written by the library: they
        # come back as a row that sees no key (output 0, LSE -inf), not as uninitialised memory.
        out = torch.zeros(_out_shape(qc, vc), dtype=out_dtype, device=q.device)
        lse = torch.full(_lse_shape(qc, varlen), float("-inf"), dtype=torch.float32, device=q.device)
    else:
        out = torch.empty(_out_shape(qc, vc), dtype=out_dtype, device=q.device)
        lse = torch.empty(_lse_shape(qc, varlen), dtype=torch.float32, device=q.device)
    (qc, kc, vc), float8_views = _float8_views(q=qc, k=kc, v=vc)
    rng_state = _draw_rng_state(dropout_p)
    seed, offset = (int(x) for x in rng_state.tolist())  # a CPU tensor: no device sync
    with _on_device(q):
        raise_for_status(_ext.fwd(
            qc, kc, vc, out, softmax_lse=lse, cu_seqlens_q=_dl(cu_seqlens_q), cu_seqlens_k=_dl(cu_seqlens_k),
            seqused_k=_dl(seqused_k), max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
            softcap=softcap, alibi_slopes=_dl(alibi_slopes), dropout_p=dropout_p, dropout_seed=seed,
            dropout_offset=offset, num_splits=num_splits, block_table=_dl(block_table), q_descale=_dl(q_descale),
            k_descale=_dl(k_descale), v_descale=_dl(v_descale), float8_views=float8_views, stream=_stream(q),
            workspace=_workspace(q)))
    return (out if fp8 else out.to(q.dtype)), lse, rng_state


fwd = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd)


@fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, softcap, alibi_slopes, dropout_p, num_splits, block_table=None, q_descale=None,
      k_descale=None, v_descale=None):
    varlen = cu_seqlens_q is not None
    out = q.new_empty(_out_shape(q, v), dtype=torch.bfloat16 if _is_fp8(q) else q.dtype)
    lse = q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)
    return out, lse, torch.empty(2, dtype=torch.int64, device="cpu")


def _bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, softmax_lse: Tensor,
         cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor],
         max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
         window_right: int, softcap: float, alibi_slopes: Optional[Tensor], dropout_p: float, rng_state: Tensor,
         deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of flashattn::fwd with the same options and its rng_state."""
    qc, kc, vc, oc, doc = (_last_dim_contiguous(_compute(x)) for x in (q, k, v, out, dout))
    # Varlen: rows past the last cu_seqlens entry take part in nothing; their gradient is 0.
    alloc = torch.zeros if cu_seqlens_q is not None else torch.empty
    dq = alloc(qc.shape, dtype=qc.dtype, device=q.device)
    dk = alloc(kc.shape, dtype=qc.dtype, device=q.device)
    dv = alloc(vc.shape, dtype=qc.dtype, device=q.device)
    seed, offset = (int(x) for x in rng_state.tolist())
    with _on_device(q):
        raise_for_status(_ext.bwd(
            doc, qc, kc, vc, oc, _dl(softmax_lse), dq, dk, dv, cu_seqlens_q=_dl(cu_seqlens_q),
            cu_seqlens_k=_dl(cu_seqlens_k), seqused_k=_dl(seqused_k), max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal, window_left=window_left,
            window_right=window_right, softcap=softcap, alibi_slopes=_dl(alibi_slopes), dropout_p=dropout_p,
            dropout_seed=seed, dropout_offset=offset, deterministic=deterministic, stream=_stream(q),
            workspace=_workspace(q)))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


bwd = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd)


@bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state,
      deterministic):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class FlashAttnFunc(torch.autograd.Function):
    """Differentiable attention over flashattn::fwd/bwd: dense or varlen (with cu_seqlens).
    Returns (out, softmax_lse, rng_state); only out is differentiable."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
                alibi_slopes: Optional[Tensor], dropout_p: float, num_splits: int,
                deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        out, lse, rng_state = (_fwd if _direct_call_ok(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes)
                                 else torch.ops.flashattn.fwd)(
            q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            window_left, window_right, softcap, alibi_slopes, dropout_p, num_splits)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, rng_state)
        ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                       dropout_p, deterministic)
        ctx.mark_non_differentiable(lse, rng_state)
        return out, lse, rng_state

    @staticmethod
    def backward(ctx: Any, dout: Tensor, *unused: Any) -> Tuple[Optional[Tensor], ...]:
        q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, rng_state = ctx.saved_tensors
        (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p,
         deterministic) = ctx.options
        tensors = (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes)
        dq, dk, dv = (_bwd if _direct_call_ok(*tensors) else torch.ops.flashattn.bwd)(
            dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state,
            deterministic)
        return (dq, dk, dv) + (None,) * 14


# ---------------------------------------------------------------------------------------------
# flashattn::fwd_kvcache (inference: not differentiable)
# ---------------------------------------------------------------------------------------------
def _fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor], v_new: Optional[Tensor],
                 cache_seqlens: Optional[Tensor], cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor],
                 block_table: Optional[Tensor], rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], rotary_interleaved: bool,
                 softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
                 alibi_slopes: Optional[Tensor], num_splits: int, cu_seqlens_q: Optional[Tensor] = None,
                 max_seqlen_q: int = 0, q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                 v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Attention over a KV cache; k_new/v_new are appended into the caches in place. With
    cu_seqlens_q, q is (total_q, heads, d) and softmax_lse (heads, total_q). float8_e4m3fn q and
    caches take float32 (batch, heads_k) descales and give a bfloat16 out."""
    q, k_new, v_new = (None if t is None else _last_dim_contiguous(t.detach()) for t in (q, k_new, v_new))
    varlen = cu_seqlens_q is not None
    alloc = torch.zeros if varlen else torch.empty  # varlen rows past the last sequence: 0 / -inf
    out = alloc(_out_shape(q, v_cache), dtype=_out_dtype(q), device=q.device)
    lse = (torch.full(_lse_shape(q, True), float("-inf"), dtype=torch.float32, device=q.device) if varlen
           else torch.empty(_lse_shape(q, False), dtype=torch.float32, device=q.device))
    # fp8 caches go as uint8 views of their memory: appends still land in the caller's caches.
    (q, kc, vc, k_new, v_new, rotary_cos, rotary_sin), float8_views = _float8_views(
        q=q, k_cache=k_cache.detach(), v_cache=v_cache.detach(), k_new=k_new, v_new=v_new, rotary_cos=rotary_cos,
        rotary_sin=rotary_sin)
    with _on_device(q):
        raise_for_status(_ext.fwd_kvcache(
            q, kc, vc, out, k_new=k_new, v_new=v_new,
            cache_seqlens=_dl(cache_seqlens), cache_batch_idx=_dl(cache_batch_idx),
            cache_leftpad=_dl(cache_leftpad), block_table=_dl(block_table),
            rotary_cos=_dl(rotary_cos), rotary_sin=_dl(rotary_sin), rotary_interleaved=rotary_interleaved,
            softmax_lse=lse, softmax_scale=softmax_scale, causal=causal, window_left=window_left,
            window_right=window_right, softcap=softcap, alibi_slopes=_dl(alibi_slopes), num_splits=num_splits,
            cu_seqlens_q=_dl(cu_seqlens_q), max_seqlen_q=max_seqlen_q, q_descale=_dl(q_descale),
            k_descale=_dl(k_descale), v_descale=_dl(v_descale), float8_views=float8_views, stream=_stream(q),
            workspace=_workspace(q)))
    return out, lse


fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"))(_fwd_kvcache)


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, k_new, v_new, cache_seqlens, cache_batch_idx, cache_leftpad, block_table, rotary_cos,
      rotary_sin, rotary_interleaved, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
      num_splits, cu_seqlens_q=None, max_seqlen_q=0, q_descale=None, k_descale=None, v_descale=None):
    varlen = cu_seqlens_q is not None
    out = q.new_empty(_out_shape(q, v_cache), dtype=torch.bfloat16 if _is_fp8(q) else q.dtype)
    return out, q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# flashattn::combine
# ---------------------------------------------------------------------------------------------
def _combine(out_partial: Tensor, lse_partial: Tensor, out_dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """Library layout: out_partial (splits, batch, seqlen, heads, d) or (splits, total, heads, d),
    lse_partial (splits, batch, heads, seqlen) or (splits, heads, total), both float32.
    Returns (out, lse (batch, heads, seqlen) or (heads, total))."""
    out = torch.empty(out_partial.shape[1:], dtype=out_dtype, device=out_partial.device)
    lse = torch.empty(lse_partial.shape[1:], dtype=torch.float32, device=out_partial.device)
    with _on_device(out_partial):
        raise_for_status(_ext.combine(_dl(out_partial), _dl(lse_partial), out, softmax_lse=lse,
                                      stream=_stream(out_partial), workspace=_workspace(out_partial)))
    return out, lse


combine = torch.library.custom_op("flashattn::combine", mutates_args=())(_combine)


@combine.register_fake
def _(out_partial, lse_partial, out_dtype):
    return (out_partial.new_empty(out_partial.shape[1:], dtype=out_dtype),
            lse_partial.new_empty(lse_partial.shape[1:], dtype=torch.float32))


# ---------------------------------------------------------------------------------------------
# What interface.py calls for torch tensors
# ---------------------------------------------------------------------------------------------
def attention(q: Tensor, k: Tensor, v: Tensor, *, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
              causal: bool, window_size: Tuple[int, int], softcap: float, alibi_slopes: Optional[Tensor],
              dropout_p: float, num_splits: int, deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """(out, softmax_lse, rng_state), differentiable in q, k, v."""
    return FlashAttnFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q), int(max_seqlen_k),
                               float(softmax_scale), bool(causal), int(window_size[0]), int(window_size[1]),
                               float(softcap), alibi_slopes, float(dropout_p), int(num_splits), bool(deterministic))


def attention_no_grad(q: Tensor, k: Tensor, v: Tensor, *, cu_seqlens_q: Optional[Tensor],
                      cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int,
                      max_seqlen_k: int, softmax_scale: float, causal: bool, window_size: Tuple[int, int],
                      softcap: float, alibi_slopes: Optional[Tensor], dropout_p: float,
                      num_splits: int, block_table: Optional[Tensor] = None, q_descale: Optional[Tensor] = None,
                      k_descale: Optional[Tensor] = None,
                      v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """(out, softmax_lse, rng_state) outside autograd: the raw forward ring-attention libraries call,
    varlen queries over a paged k/v (block_table), and fp8 inputs (with their descales): neither has
    a backward."""
    with torch.no_grad():
        direct = _direct_call_ok(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, block_table, q_descale,
                                 k_descale, v_descale)
        return (_fwd if direct else torch.ops.flashattn.fwd)(
            q.detach(), k.detach(), v.detach(), cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q),
            int(max_seqlen_k), float(softmax_scale), bool(causal), int(window_size[0]), int(window_size[1]),
            float(softcap), alibi_slopes, float(dropout_p), int(num_splits), block_table, q_descale, k_descale,
            v_descale)


def attention_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, **kw: Any) -> Tuple[Tensor, Tensor]:
    window_left, window_right = kw.pop("window_size")
    args = (q, k_cache, v_cache, kw["k_new"], kw["v_new"], kw["cache_seqlens"], kw["cache_batch_idx"],
            kw["cache_leftpad"], kw["block_table"], kw["rotary_cos"], kw["rotary_sin"], bool(kw["rotary_interleaved"]),
            float(kw["softmax_scale"]), bool(kw["causal"]), int(window_left), int(window_right), float(kw["softcap"]),
            kw["alibi_slopes"], int(kw["num_splits"]), kw["cu_seqlens_q"], int(kw["max_seqlen_q"]),
            kw.get("q_descale"), kw.get("k_descale"), kw.get("v_descale"))
    if torch.compiler.is_compiling():
        return torch.ops.flashattn.fwd_kvcache(*args)
    tensors = [a for a in args if a is None or isinstance(a, Tensor)]
    if _direct_call_ok(*tensors):
        result = _fwd_kvcache(*args)
        _bump_versions(k_cache, v_cache)
        return result
    return torch.ops.flashattn.fwd_kvcache(*args)


def combine_partials(out_partial: Tensor, lse_partial: Tensor, out_dtype: Optional[torch.dtype]) -> Tuple[Tensor, Tensor]:
    return (_combine if _direct_call_ok(out_partial, lse_partial) else torch.ops.flashattn.combine)(
        out_partial, lse_partial, out_dtype or out_partial.dtype)
