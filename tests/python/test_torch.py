"""The torch layer: autograd, custom ops, torch.compile, CUDA graphs, streams.

Every test runs on the CPU (the CPU backend, float32 and bfloat16) and, where torch sees a CUDA
device, on the GPU (float16 and bfloat16). A GPU call the library cannot run yet (its kernels are
still being written: the library answers UnsupportedError) skips with the library's message.

Accuracy: the forward and the gradients against a torch reference (flashattn.reference, autograd
through it) with the rule |ours - exact| <= 2 x |torch low-precision - exact| + floor: exact is
the reference in float64 on the CPU (float32 on the GPU, as "fp32 torch reference"), torch
low-precision the same reference run by torch in the inputs' dtype.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from flashattn import (  # noqa: E402
    flash_attn_combine,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
    reference,
)
from flashattn.bert_padding import pad_input, unpad_input  # noqa: E402
from flashattn.rotary import apply_rotary_emb  # noqa: E402
from helpers import assert_within_rule, max_abs_diff, rounding_floor  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
CUDA_ONLY = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device visible to torch")


def dtypes_for(device):
    return [torch.float32, torch.bfloat16] if device == "cpu" else [torch.float16, torch.bfloat16]


DEVICE_DTYPES = [(d, t) for d in DEVICES for t in dtypes_for(d)]
DEVICE_DTYPE_IDS = [f"{d}-{str(t).split('.')[-1]}" for d, t in DEVICE_DTYPES]


def run_or_skip(fn, *args, **kwargs):
    """Runs a library call; a GPU backend that cannot run it yet skips the test with its message."""
    try:
        return fn(*args, **kwargs)
    except flashattn.UnsupportedError as e:
        pytest.skip(f"library reports unsupported: {e}")


def exact_dtype(device):
    return torch.float64 if device == "cpu" else torch.float32


def floor_for(dtype, q, k, v, scale, exact):
    to_np = lambda t: t.detach().double().cpu().numpy()  # noqa: E731
    name = {torch.float32: np.float32, torch.float16: np.float16}.get(dtype)
    if dtype == torch.bfloat16:
        return 2.0 ** -8 * max(1.0, float(exact.detach().abs().max()) if exact.numel() else 1.0)
    return rounding_floor(name, to_np(q), to_np(k), to_np(v), scale, to_np(exact))


def make(shape, device, dtype, requires_grad=True, generator=None):
    t = torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def check_fwd_bwd(ours_fn, ref_fn, inputs, dtype, device, scale, what):
    """ours_fn(*inputs) and ref_fn(*inputs) -> out; compares out, then the input gradients. A
    backward the library cannot run yet skips after the forward was checked."""
    out = run_or_skip(ours_fn, *inputs)
    hi = [x.detach().to(exact_dtype(device)).requires_grad_() for x in inputs]
    lo = [x.detach().clone().requires_grad_() for x in inputs]
    out_hi, out_lo = ref_fn(*hi), ref_fn(*lo)
    assert out.dtype == inputs[0].dtype and out.shape == out_hi.shape
    q, k, v = inputs[:3]
    assert_within_rule(out, out_hi, out_lo, floor_for(dtype, q, k, v, scale, out_hi), f"{what} out")
    dout = torch.randn_like(out)
    grads = run_or_skip(torch.autograd.grad, out, inputs, dout)
    grads_hi = torch.autograd.grad(out_hi, hi, dout.to(out_hi.dtype))
    grads_lo = torch.autograd.grad(out_lo, lo, dout)
    for name, g, g_hi, g_lo in zip("qkv", grads, grads_hi, grads_lo):
        assert g.shape == g_hi.shape and g.dtype == inputs[0].dtype
        assert_within_rule(g, g_hi, g_lo, floor_for(dtype, q, k, v, scale, g_hi) * 4, f"{what} d{name}")


# ---------------------------------------------------------------------------------------------
# Forward and backward of every entry point against the reference
# ---------------------------------------------------------------------------------------------
CASES = {
    "plain": dict(shape=(2, 33, 33, 4, 4, 64), options=dict()),
    "causal_gqa_sq<sk": dict(shape=(2, 17, 45, 4, 2, 64), options=dict(causal=True)),
    "causal_mqa_sq>sk": dict(shape=(1, 40, 24, 4, 1, 32), options=dict(causal=True)),
    "window": dict(shape=(2, 30, 30, 2, 2, 64), options=dict(window_size=(6, 3))),
    "softcap": dict(shape=(1, 25, 31, 2, 2, 128), options=dict(softcap=3.0)),
    "alibi": dict(shape=(2, 20, 20, 4, 2, 32), options=dict(alibi=True, causal=True)),
    "head_dim_72": dict(shape=(1, 16, 16, 2, 2, 72), options=dict()),
    "head_dim_20_padded": dict(shape=(2, 19, 23, 2, 2, 20), options=dict(causal=True)),
    "scale": dict(shape=(1, 16, 16, 2, 2, 64), options=dict(softmax_scale=0.05)),
    "deterministic": dict(shape=(1, 33, 33, 2, 1, 64), options=dict(deterministic=True)),
}


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
@pytest.mark.parametrize("case", list(CASES))
def test_func_fwd_bwd(device, dtype, case):
    b, sq, sk, hq, hk, d = CASES[case]["shape"]
    options = dict(CASES[case]["options"])
    g = torch.Generator().manual_seed(hash(case) % 2**31)
    q, k, v = make((b, sq, hq, d), device, dtype, generator=g), make((b, sk, hk, d), device, dtype, generator=g), \
        make((b, sk, hk, d), device, dtype, generator=g)
    alibi = None
    if options.pop("alibi", False):
        alibi = (torch.rand((b, hq), generator=g) * 0.3 + 0.05).to(device)
    deterministic = options.pop("deterministic", False)
    scale = options.get("softmax_scale") or d ** -0.5

    def ours(q, k, v):
        return flash_attn_func(q, k, v, alibi_slopes=alibi, deterministic=deterministic, **options)

    def ref(q, k, v):
        slopes = None if alibi is None else alibi.to(q.dtype)
        return reference.attention_reference(q, k, v, alibi_slopes=slopes, **options)[0]

    check_fwd_bwd(ours, ref, [q, k, v], dtype, device, scale, case)
    if deterministic:
        first = torch.autograd.grad(ours(q, k, v).sum(), (q, k, v))
        second = torch.autograd.grad(ours(q, k, v).sum(), (q, k, v))
        for a, b_ in zip(first, second):
            assert torch.equal(a, b_)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
def test_dropout_fwd_bwd(device, dtype):
    b, s, h, d, p = 2, 37, 3, 64, 0.2
    g = torch.Generator().manual_seed(5)
    q, k, v = (make((b, s, h, d), device, dtype, generator=g) for _ in range(3))
    torch.manual_seed(77)
    out, lse, s_dmask = run_or_skip(flash_attn_func, q, k, v, dropout_p=p, causal=True, return_attn_probs=True)
    assert s_dmask.shape == (b, h, 128, 128) and s_dmask.dtype == dtype
    keep = s_dmask[:, :, :s, :s] >= 0
    torch.manual_seed(77)
    check_fwd_bwd(lambda q, k, v: flash_attn_func(q, k, v, dropout_p=p, causal=True),
                  lambda q, k, v: reference.attention_reference(q, k, v, causal=True, dropout_p=p,
                                                                dropout_keep=keep)[0],
                  [q, k, v], dtype, device, d ** -0.5, "dropout")
    torch.manual_seed(77)
    again = flash_attn_func(q, k, v, dropout_p=p, causal=True)
    assert torch.equal(again, out)  # torch.manual_seed makes dropout reproducible
    visible = torch.tril(torch.ones(s, s, dtype=torch.bool, device=device))
    assert abs((1 - keep[:, :, visible].float().mean()).item() - p) < 0.05


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
def test_packed_fwd_bwd(device, dtype):
    g = torch.Generator().manual_seed(6)
    qkv = make((2, 21, 3, 4, 32), device, dtype, generator=g)
    out = run_or_skip(flash_attn_qkvpacked_func, qkv, causal=True)
    parts = [qkv[:, :, i].detach().clone().requires_grad_() for i in range(3)]
    expected = flash_attn_func(*parts, causal=True)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    out_kv = flash_attn_kvpacked_func(qkv[:, :, 0], qkv[:, :, 1:], causal=True)
    torch.testing.assert_close(out_kv, expected, atol=0, rtol=0)
    (dqkv,) = run_or_skip(torch.autograd.grad, out.float().square().sum(), (qkv,))
    grads = torch.autograd.grad(expected.float().square().sum(), parts)
    torch.testing.assert_close(dqkv, torch.stack(grads, dim=2), atol=0, rtol=0)
    q = qkv[:, :, 0].detach().clone().requires_grad_()
    kv = qkv[:, :, 1:].detach().clone().requires_grad_()
    out_kv = flash_attn_kvpacked_func(q, kv, causal=True)
    torch.testing.assert_close(out_kv, expected, atol=0, rtol=0)
    dq, dkv = torch.autograd.grad(out_kv.float().square().sum(), (q, kv))
    torch.testing.assert_close(dkv, torch.stack(grads[1:], dim=2), atol=0, rtol=0)


def _cu(lens, device):
    return torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device=device)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(window_size=(4, 0), softcap=2.0)],
                         ids=["plain", "causal", "window_softcap"])
def test_varlen_fwd_bwd(device, dtype, options):
    lens_q, lens_k = [5, 0, 19, 1], [9, 3, 19, 33]
    cu_q, cu_k = _cu(lens_q, device), _cu(lens_k, device)
    g = torch.Generator().manual_seed(7)
    q = make((sum(lens_q), 4, 64), device, dtype, generator=g)
    k = make((sum(lens_k), 2, 64), device, dtype, generator=g)
    v = make((sum(lens_k), 2, 64), device, dtype, generator=g)

    def ours(q, k, v):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **options)

    def ref(q, k, v):
        return reference.varlen_attention_reference(q, k, v, cu_q.tolist(), cu_k.tolist(), **options)[0]

    check_fwd_bwd(ours, ref, [q, k, v], dtype, device, 64 ** -0.5, "varlen")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
def test_varlen_packed_fwd_bwd(device, dtype):
    lens = [7, 12, 3]
    cu = _cu(lens, device)
    g = torch.Generator().manual_seed(8)
    qkv = make((sum(lens), 3, 2, 32), device, dtype, generator=g)
    out = run_or_skip(flash_attn_varlen_qkvpacked_func, qkv, cu, max(lens), causal=True)
    parts = [qkv[:, i].detach().clone().requires_grad_() for i in range(3)]
    expected = flash_attn_varlen_func(*parts, cu, cu, max(lens), max(lens), causal=True)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    out_kv = flash_attn_varlen_kvpacked_func(qkv[:, 0], qkv[:, 1:], cu, cu, max(lens), max(lens), causal=True)
    torch.testing.assert_close(out_kv, expected, atol=0, rtol=0)
    (dqkv,) = run_or_skip(torch.autograd.grad, out.float().sum(), (qkv,))
    grads = torch.autograd.grad(expected.float().sum(), parts)
    torch.testing.assert_close(dqkv, torch.stack(grads, dim=1), atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------
# KV cache and combine
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DEVICE_DTYPE_IDS)
@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_kvcache_append_rotary(device, dtype, paged):
    g = torch.Generator().manual_seed(9)
    batch, hq, hk, d, capacity, page, new = 2, 4, 2, 64, 64, 16, 2
    lens = torch.tensor([10, 37], dtype=torch.int32, device=device)
    q = make((batch, new, hq, d), device, dtype, False, g)
    k_new, v_new = make((batch, new, hk, d), device, dtype, False, g), make((batch, new, hk, d), device, dtype, False, g)
    k_log, v_log = make((batch, capacity, hk, d), device, dtype, False, g), make((batch, capacity, hk, d), device,
                                                                               dtype, False, g)
    angles = torch.rand((capacity, 16), generator=g) * 2 * math.pi
    cos, sin = angles.cos().to(device, dtype), angles.sin().to(device, dtype)
    kwargs = {}
    if paged:
        pages = capacity // page
        table = torch.randperm(batch * pages, generator=g).to(torch.int32).reshape(batch, pages).to(device)
        k_cache = k_log.reshape(batch * pages, page, hk, d)[table.flatten().argsort()].contiguous()
        v_cache = v_log.reshape(batch * pages, page, hk, d)[table.flatten().argsort()].contiguous()
        kwargs["block_table"] = table
    else:
        k_cache, v_cache = k_log.clone(), v_log.clone()
    out = run_or_skip(flash_attn_with_kvcache, q, k_cache, v_cache, k_new, v_new, cos, sin, cache_seqlens=lens,
                      causal=True, **kwargs)  # rotary_interleaved defaults to True, as in flash_attn
    k_rot = apply_rotary_emb(k_new.float(), cos.float(), sin.float(), interleaved=True, seqlen_offsets=lens)
    q_rot = apply_rotary_emb(q.float(), cos.float(), sin.float(), interleaved=True, seqlen_offsets=lens)
    for b in range(batch):
        n = int(lens[b])
        k_log[b, n:n + new], v_log[b, n:n + new] = k_rot[b].to(dtype), v_new[b]
        exact, _, _ = reference.attention_reference(q_rot[b:b + 1].double(), k_log[b:b + 1, :n + new].double(),
                                                    v_log[b:b + 1, :n + new].double(), causal=True)
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        assert max_abs_diff(out[b:b + 1], exact) < tol
    cache_view = k_cache[table].reshape(batch, capacity, hk, d) if paged else k_cache
    assert max_abs_diff(cache_view, k_log) < (1e-6 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_combine(device):
    g = torch.Generator().manual_seed(10)
    splits, b, s, h, d = 3, 2, 4, 3, 64
    out_partial = torch.randn((splits, b, s, h, d), generator=g).to(device)
    lse_partial = torch.randn((splits, b, s, h), generator=g).to(device)
    out, lse = run_or_skip(flash_attn_combine, out_partial, lse_partial, out_dtype=torch.bfloat16)
    weights = torch.softmax(lse_partial, dim=0)
    torch.testing.assert_close(out.float(), (weights[..., None] * out_partial).sum(0), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse, torch.logsumexp(lse_partial, dim=0), atol=1e-5, rtol=1e-5)
    assert out.dtype == torch.bfloat16 and lse.shape == (b, s, h)


# ---------------------------------------------------------------------------------------------
# gradcheck: float64 inputs are computed in float32 (the library has no float64), so the finite
# differences use eps = 1e-3 (float32 rounding / eps stays ~1e-4) and tolerances of that order.
# ---------------------------------------------------------------------------------------------
GRADCHECK = dict(eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(softcap=1.0, window_size=(2, 1))],
                         ids=["plain", "causal", "softcap_window"])
def test_gradcheck_func(options):
    g = torch.Generator().manual_seed(11)
    q = torch.randn((1, 5, 2, 8), generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn((1, 6, 1, 8), generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn((1, 6, 1, 8), generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attn_func(q, k, v, **options), (q, k, v), **GRADCHECK)


def test_gradcheck_varlen_and_odd_head_dim():
    g = torch.Generator().manual_seed(12)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    q, k, v = (torch.randn((7, 2, 5), generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v), **GRADCHECK)


# ---------------------------------------------------------------------------------------------
# Custom ops, torch.compile
# ---------------------------------------------------------------------------------------------
def test_opcheck_custom_ops():
    g = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn((1, 9, 2, 16), generator=g) for _ in range(3))
    torch.library.opcheck(torch.ops.flashattn.fwd.default,
                          (q, k, v, None, None, None, 0, 0, 0.25, True, -1, -1, 0.0, None, 0.0, 1))
    out, lse, rng = torch.ops.flashattn.fwd(q, k, v, None, None, None, 0, 0, 0.25, True, -1, -1, 0.0, None, 0.0, 1)
    torch.library.opcheck(torch.ops.flashattn.bwd.default,
                          (torch.randn_like(out), q, k, v, out, lse, None, None, None, 0, 0, 0.25, True, -1, -1, 0.0,
                           None, 0.0, rng, False))
    torch.library.opcheck(torch.ops.flashattn.combine.default,
                          (torch.randn(2, 1, 3, 2, 16), torch.randn(2, 1, 2, 3), torch.float32))
    k_cache, v_cache = torch.randn(1, 16, 2, 16), torch.randn(1, 16, 2, 16)
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default,
                          (q[:, :1], k_cache, v_cache, k[:, :1], v[:, :1], torch.tensor([4], dtype=torch.int32),
                           None, None, None, None, None, False, 0.25, True, -1, -1, 0.0, None, 0),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("device", DEVICES)
def test_eager_calls_match_the_ops(device):
    # Eager calls on plain tensors run the ops' implementations without the dispatcher; the results
    # must be those of the ops, bit for bit, forward and backward (deterministic: the same adds).
    dtype = dtypes_for(device)[-1]
    g = torch.Generator().manual_seed(21)
    q, k, v = (make((2, 200, 4, 64), device, dtype, generator=g) for _ in range(3))
    out = run_or_skip(flash_attn_func, q, k, v, causal=True, deterministic=True)
    dout = torch.randn(out.shape, generator=g).to(device=device, dtype=dtype)
    run_or_skip(out.backward, dout)
    args = (None, None, None, 0, 0, 64 ** -0.5, True, -1, -1, 0.0, None, 0.0)
    # num_splits 1, as flash_attn_func's default
    op_out, op_lse, rng = torch.ops.flashattn.fwd(q.detach(), k.detach(), v.detach(), *args, 1)
    dq, dk, dv = torch.ops.flashattn.bwd(dout, q.detach(), k.detach(), v.detach(), op_out, op_lse, *args, rng, True)
    assert torch.equal(out, op_out)
    for got, want in ((q.grad, dq), (k.grad, dk), (v.grad, dv)):
        assert torch.equal(got, want)


def test_eager_calls_skip_the_dispatcher(monkeypatch):
    # This torch has what a direct call asks it (private functions, probed at import): eager calls
    # on plain tensors reach the implementations without the op, forward and backward.
    from flashattn import torch_ops

    assert torch_ops._DIRECT_CALLS
    calls = []
    for name in ("_fwd", "_bwd"):
        impl = getattr(torch_ops, name)
        monkeypatch.setattr(torch_ops, name, lambda *a, _impl=impl, _name=name: calls.append(_name) or _impl(*a))
    g = torch.Generator().manual_seed(22)
    q, k, v = (torch.randn((1, 16, 2, 16), generator=g).requires_grad_() for _ in range(3))
    flash_attn_func(q, k, v).sum().backward()
    assert calls == ["_fwd", "_bwd"]


def test_dispatch_modes_see_the_ops():
    # Under a dispatch mode (as FlopCounterMode's or FakeTensorMode) the calls go through the ops,
    # so the mode sees them; under the profiler too.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(22)
    q, k, v = (torch.randn((1, 9, 2, 16), generator=g).requires_grad_() for _ in range(3))
    with Recorder() as seen:
        flash_attn_func(q, k, v, causal=True).sum().backward()
        k_cache, v_cache = torch.zeros(1, 16, 2, 16), torch.zeros(1, 16, 2, 16)
        with torch.no_grad():
            flash_attn_with_kvcache(q[:, :1], k_cache, v_cache, cache_seqlens=torch.tensor([4], dtype=torch.int32))
    assert any("flashattn.fwd." in op for op in seen.ops), seen.ops
    assert any("flashattn.bwd." in op for op in seen.ops), seen.ops
    assert any("flashattn.fwd_kvcache." in op for op in seen.ops), seen.ops
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        flash_attn_func(q.detach(), k.detach(), v.detach(), causal=True)
    assert any(e.name == "flashattn::fwd" for e in prof.events()), sorted({e.name for e in prof.events()})


def test_direct_kvcache_call_moves_the_cache_versions():
    # The op marks its in-place appends (mutates_args); the direct call must too, so that autograd
    # refuses a backward through a saved copy of the cache's old contents.
    g = torch.Generator().manual_seed(23)
    q = torch.randn((1, 1, 2, 16), generator=g)
    k_cache, v_cache = torch.zeros(1, 16, 2, 16), torch.zeros(1, 16, 2, 16)
    versions = (k_cache._version, v_cache._version)
    with torch.no_grad():
        flash_attn_with_kvcache(q, k_cache, v_cache, torch.randn((1, 1, 2, 16), generator=g),
                                torch.randn((1, 1, 2, 16), generator=g),
                                cache_seqlens=torch.tensor([4], dtype=torch.int32))
    assert k_cache._version > versions[0] and v_cache._version > versions[1]


def _compile_inputs(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    g = torch.Generator().manual_seed(14)
    return dtype, [make((2, 24, 4, 64), device, dtype, generator=g) for _ in range(3)]


def _layer(q, k, v):
    out = flash_attn_func(q * 2, k, v, causal=True)
    return (out.float() ** 2).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward(device):
    dtype, (q, k, v) = _compile_inputs(device)
    torch._dynamo.reset()
    with torch.no_grad():
        eager = run_or_skip(_layer, q, k, v)
        torch.testing.assert_close(torch.compile(_layer, fullgraph=True)(q, k, v), eager)
        cu = _cu([10, 14], device)
        varlen = torch.compile(lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, 14, 14, causal=True),
                               fullgraph=True)
        qv, kv, vv = (x.detach().reshape(48, 4, 64)[:24] for x in (q, k, v))
        torch.testing.assert_close(varlen(qv, kv, vv), flash_attn_varlen_func(qv, kv, vv, cu, cu, 14, 14,
                                                                              causal=True))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_backward(device):
    dtype, (q, k, v) = _compile_inputs(device)
    eager = run_or_skip(_layer, q, k, v)
    eager_grads = run_or_skip(torch.autograd.grad, eager, (q, k, v))
    torch._dynamo.reset()
    loss = torch.compile(_layer, fullgraph=True)(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    torch.testing.assert_close(loss, eager)
    for a, b in zip(grads, eager_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_kvcache_and_combine(device):
    dtype, (q, k, v) = _compile_inputs(device)
    q, k, v = q.detach(), k.detach(), v.detach()
    run_or_skip(flash_attn_with_kvcache, q[:, :1], k[:, :4], v[:, :4])  # skips where the backend lacks it
    k_cache, v_cache = (torch.zeros((2, 32, 4, 64), device=device, dtype=dtype) for _ in range(2))
    lens = torch.tensor([3, 9], dtype=torch.int32, device=device)
    torch._dynamo.reset()
    decode = torch.compile(lambda q, kn, vn: flash_attn_with_kvcache(q, k_cache, v_cache, kn, vn, cache_seqlens=lens,
                                                                      causal=True), fullgraph=True)
    out = decode(q[:, :1], k[:, :1], v[:, :1])
    assert out.shape == (2, 1, 4, 64)
    assert torch.equal(k_cache[0, 3], k[0, 0]) and torch.equal(k_cache[1, 9], k[1, 0])
    partial = torch.randn((2, 2, 3, 4, 64), device=device)
    lse_partial = torch.randn((2, 2, 3, 4), device=device)
    run_or_skip(flash_attn_combine, partial, lse_partial)
    combined = torch.compile(lambda o, l: flash_attn_combine(o, l), fullgraph=True)(partial, lse_partial)
    torch.testing.assert_close(combined[0], flash_attn_combine(partial, lse_partial)[0])


# ---------------------------------------------------------------------------------------------
# CUDA: graph capture, a non-default stream
# ---------------------------------------------------------------------------------------------
@CUDA_ONLY
def test_scratch_comes_from_torchs_allocator():
    # The backward's fp32 dQ accumulator comes from torch's caching allocator, as in FlashAttention:
    # torch's peak counts it, and it goes back when the call is done.
    seqlen, heads, dim = 2048, 8, 128
    q, k, v = (make((1, seqlen, heads, dim), "cuda", torch.bfloat16) for _ in range(3))
    out = run_or_skip(flash_attn_func, q, k, v, causal=True)
    dout = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run_or_skip(out.backward, dout)
    torch.cuda.synchronize()
    grads = 3 * seqlen * heads * dim * 2  # dq, dk, dv in bf16
    accumulator = seqlen * heads * dim * 4  # fp32 dQ
    assert torch.cuda.max_memory_allocated() - base >= grads + accumulator
    assert torch.cuda.memory_allocated() - base <= grads


@CUDA_ONLY
def test_workspace_allocator_failure_is_an_error():
    # An allocator that raises (torch's out-of-memory error, say) gives the library no memory: the
    # call fails before launching anything, and the allocator's exception reaches the caller.
    from flashattn import _ext

    def refuse(nbytes, stream):
        raise MemoryError("no scratch for the test")

    x = torch.randn((1, 256, 2, 64), device="cuda", dtype=torch.bfloat16)
    lse = torch.zeros((1, 2, 256), device="cuda", dtype=torch.float32)
    grads = [torch.empty_like(x) for _ in range(3)]
    with pytest.raises(MemoryError, match="no scratch for the test"):
        result = _ext.bwd(x, x, x, x, x, lse, *grads, stream=torch.cuda.current_stream().cuda_stream,
                          workspace=(refuse, lambda address: None))
        if result is not None and result[0] == "unsupported":
            pytest.skip(f"library reports unsupported: {result[2]}")
    torch.cuda.synchronize()


@CUDA_ONLY
def test_cuda_graph_capture():
    dtype = torch.bfloat16
    q, k, v = (make((2, 64, 4, 64), "cuda", dtype, requires_grad=False) for _ in range(3))
    run_or_skip(flash_attn_func, q, k, v, causal=True)  # warm up (and skip if unsupported)
    static_q, static_k, static_v = q.clone(), k.clone(), v.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flash_attn_func(static_q, static_k, static_v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = flash_attn_func(static_q, static_k, static_v, causal=True)
    for _ in range(2):
        new = [make((2, 64, 4, 64), "cuda", dtype, requires_grad=False) for _ in range(3)]
        for dst, src in zip((static_q, static_k, static_v), new):
            dst.copy_(src)
        graph.replay()
        torch.testing.assert_close(static_out, flash_attn_func(*new, causal=True), atol=0, rtol=0)


@CUDA_ONLY
def test_cuda_graph_capture_backward():
    q, k, v = (make((1, 64, 2, 64), "cuda", torch.float16) for _ in range(3))

    # deterministic: the replayed and the eager dq are compared bitwise (fp32 atomics would not be).
    def step():
        # Nothing of the autograd graph outlives the call: a graph kept alive from a warm-up on the
        # default stream would tie the leaves' AccumulateGrad nodes to that stream and break capture.
        return torch.autograd.grad(flash_attn_func(q, k, v, causal=True, deterministic=True).sum(), (q, k, v))

    run_or_skip(step)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        static_grads = step()
    graph.replay()
    expected = step()
    for a, b in zip(static_grads, expected):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@CUDA_ONLY
def test_non_default_stream():
    """Inputs written on a side stream and attention run there: the library must launch on
    torch's current stream (a launch on another stream would race with the producer)."""
    dtype = torch.float16
    run_or_skip(flash_attn_func, *(make((1, 16, 2, 64), "cuda", dtype, False) for _ in range(3)))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        q, k, v = (torch.randn((4, 2048, 8, 128), device="cuda", dtype=dtype) for _ in range(3))
        torch.cuda._sleep(50_000_000)  # keep the stream busy: a wrong-stream launch would read early
        q.mul_(2.0)
        out = flash_attn_func(q, k, v, causal=True)
        grads = torch.autograd.grad(flash_attn_func(q.requires_grad_(), k, v, causal=True).sum(), (q,)) \
            if _bwd_supported() else None
    side.synchronize()
    expected = flash_attn_func(q.detach(), k, v, causal=True)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    if grads is not None:
        assert torch.isfinite(grads[0]).all()


def _bwd_supported() -> bool:
    try:
        x = torch.zeros((1, 8, 1, 64), device="cuda", dtype=torch.float16, requires_grad=True)
        torch.autograd.grad(flash_attn_func(x, x, x).sum(), (x,))
        return True
    except flashattn.UnsupportedError:
        return False


# ---------------------------------------------------------------------------------------------
# Errors, padding helpers
# ---------------------------------------------------------------------------------------------
def test_errors_carry_the_library_message():
    q = torch.zeros((1, 4, 2, 64))
    with pytest.raises(ValueError, match=r"argument 'v': .*got 3"):
        flash_attn_func(q, q, torch.zeros((1, 3, 2, 64)))
    with pytest.raises(TypeError, match=r"argument 'q': dtype must be float16, bfloat16, float32 or float8_e4m3fn, got int32"):
        flash_attn_func(q.int(), q.int(), q.int())
    with pytest.raises(TypeError, match="dtype must be one of float32, float16, bfloat16"):
        flash_attn_func(q.to(torch.int16), q, q)


def test_unpad_pad_autograd_matches_masked_dense():
    g = torch.Generator().manual_seed(15)
    mask = torch.tensor([[1] * 5 + [0] * 3, [1] * 8], dtype=torch.int32)
    q, k, v = (torch.randn((2, 8, 2, 32), generator=g, requires_grad=True) for _ in range(3))
    q_u, idx, cu, max_len, used = unpad_input(q, mask)
    k_u, _, _, _, _ = unpad_input(k, mask)
    v_u, _, _, _, _ = unpad_input(v, mask)
    assert cu.dtype == torch.int32 and isinstance(max_len, int) and used.tolist() == [5, 8]
    out = pad_input(flash_attn_varlen_func(q_u, k_u, v_u, cu, cu, max_len, max_len, causal=True), idx, 2, 8)
    out.sum().backward()
    assert (q.grad[0, 5:] == 0).all() and (out[0, 5:] == 0).all()
    q2, k2, v2 = (x.detach()[:1, :5].clone().requires_grad_() for x in (q, k, v))
    dense = flash_attn_func(q2, k2, v2, causal=True)
    torch.testing.assert_close(out[:1, :5], dense)
    dense.sum().backward()
    torch.testing.assert_close(q.grad[:1, :5], q2.grad)


def test_rotary_torch_matches_numpy_and_differentiates():
    g = torch.Generator().manual_seed(16)
    x = torch.randn((2, 5, 2, 16), generator=g, requires_grad=True)
    angles = torch.rand((8, 4), generator=g)
    for interleaved in (False, True):
        y = apply_rotary_emb(x, angles.cos(), angles.sin(), interleaved=interleaved, seqlen_offsets=2)
        y_np = apply_rotary_emb(x.detach().numpy(), angles.cos().numpy(), angles.sin().numpy(),
                                interleaved=interleaved, seqlen_offsets=2)
        np.testing.assert_allclose(y.detach().numpy(), y_np, atol=1e-6)
        (dx,) = torch.autograd.grad(y.square().sum(), (x,))
        torch.testing.assert_close(dx, 2 * x.detach())  # a rotation preserves the norm


# ---------------------------------------------------------------------------------------------
# Serving shapes: paged k/v under varlen queries, left-padded caches, varlen queries over a cache
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_paged_varlen_forward_only(device):
    g = torch.Generator().manual_seed(21)
    lens_q, lens_k, page = [1, 6, 3], [40, 6, 17], 16
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32, device=device)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device=device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q = make((sum(lens_q), 4, 32), device, dtype, generator=g)
    k, v = (make((sum(lens_k), 2, 32), device, dtype, generator=g) for _ in range(2))
    table = torch.tensor([[4, 1, 6], [0, -1, -1], [2, 5, -1]], dtype=torch.int32, device=device)
    k_pages = torch.full((7, page, 2, 32), float("nan"), dtype=dtype, device=device)
    v_pages = k_pages.clone()
    for b, n in enumerate(lens_k):
        for j in range(n):
            k_pages[table[b, j // page], j % page] = k[int(cu_k[b]) + j].detach()
            v_pages[table[b, j // page], j % page] = v[int(cu_k[b]) + j].detach()
    with pytest.raises(flashattn.UnsupportedError, match="argument 'block_table': a paged k/v has no backward"):
        flash_attn_varlen_func(q, k_pages.requires_grad_(), v_pages, cu_q, cu_k, 6, 40, causal=True,
                               block_table=table)
    with torch.no_grad():
        out = run_or_skip(flash_attn_varlen_func, q, k_pages, v_pages, cu_q, cu_k, 6, 40, causal=True,
                          block_table=table)
        expected = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 40, causal=True)
    torch.testing.assert_close(out, expected, atol=1e-6 if device == "cpu" else 1e-2, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_kvcache_leftpad_and_varlen_queries(device):
    g = torch.Generator().manual_seed(22)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    cache = make((2, 10, 2, 32), device, dtype, requires_grad=False, generator=g)
    lens = torch.tensor([7, 10], dtype=torch.int32, device=device)
    pad = torch.tensor([3, 0], dtype=torch.int32, device=device)
    q = make((2, 1, 4, 32), device, dtype, requires_grad=False, generator=g)
    out = run_or_skip(flash_attn_with_kvcache, q, cache, cache, cache_seqlens=lens, cache_leftpad=pad)
    first = flash_attn_with_kvcache(q[:1], cache[:1, 3:], cache[:1, 3:], cache_seqlens=lens[:1] - 3)
    torch.testing.assert_close(out[:1], first, atol=1e-6 if device == "cpu" else 1e-2, rtol=0)
    # The same rows as varlen queries (FlashAttention-3's cu_seqlens_q).
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=device)
    from flashattn import fa3_interface as fa3
    out_v = run_or_skip(fa3.flash_attn_with_kvcache, q[:, 0], cache, cache, cache_seqlens=lens, cache_leftpad=pad,
                        cu_seqlens_q=cu, max_seqlen_q=1)
    torch.testing.assert_close(out_v, out[:, 0], atol=1e-6 if device == "cpu" else 1e-2, rtol=0)
