"""FlashAttention-3's interface (flashattn.fa3_interface, `import flash_attn_interface` after
flashattn.compat.install()): FA3's signatures and return values, the arguments it refuses
(UnsupportedError naming them) and the hints it accepts, on numpy and torch CPU tensors."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import flashattn
from flashattn import fa3_interface as fa3
from flashattn import reference
from helpers import max_abs_diff


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# FA3's hopper/flash_attn_interface.py: (name, default) in order; inspect.Parameter.empty = required.
REQUIRED = inspect.Parameter.empty
SIGNATURES = {
    "flash_attn_func": [
        ("q", REQUIRED), ("k", REQUIRED), ("v", REQUIRED), ("softmax_scale", None), ("causal", False), ("qv", None),
        ("q_descale", None), ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None), ("deterministic", False),
        ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_varlen_func": [
        ("q", REQUIRED), ("k", REQUIRED), ("v", REQUIRED), ("cu_seqlens_q", REQUIRED), ("cu_seqlens_k", REQUIRED),
        ("max_seqlen_q", REQUIRED), ("max_seqlen_k", REQUIRED), ("seqused_q", None), ("seqused_k", None),
        ("softmax_scale", None), ("causal", False), ("qv", None), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1),
        ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_with_kvcache": [
        ("q", REQUIRED), ("k_cache", REQUIRED), ("v_cache", REQUIRED), ("k", None), ("v", None), ("qv", None),
        ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None), ("cache_batch_idx", None),
        ("cache_leftpad", None), ("page_table", None), ("cu_seqlens_q", None), ("cu_seqlens_k_new", None),
        ("max_seqlen_q", None), ("rotary_seqlens", None), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("softcap", 0.0), ("rotary_interleaved", True), ("scheduler_metadata", None),
        ("num_splits", 0), ("pack_gqa", None), ("sm_margin", 0), ("return_softmax_lse", False)],
    "flash_attn_qkvpacked_func": [
        ("qkv", REQUIRED), ("softmax_scale", None), ("causal", False), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
        ("deterministic", False), ("num_heads_q", None), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_combine": [("out_partial", REQUIRED), ("lse_partial", REQUIRED), ("out", None), ("out_dtype", None)],
    "get_scheduler_metadata": [
        ("batch_size", REQUIRED), ("max_seqlen_q", REQUIRED), ("max_seqlen_k", REQUIRED), ("num_heads_q", REQUIRED),
        ("num_heads_kv", REQUIRED), ("headdim", REQUIRED), ("cache_seqlens", REQUIRED),
        ("qkv_dtype", None),  # FA3: torch.bfloat16 (torch is not imported here); unused
        ("headdim_v", None), ("cu_seqlens_q", None), ("cu_seqlens_k_new", None), ("cache_leftpad", None),
        ("page_size", None), ("max_seqlen_k_new", 0), ("causal", False), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("has_softcap", False), ("num_splits", 0), ("pack_gqa", None), ("sm_margin", 0)],
}


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_signatures_are_fa3s(name):
    params = inspect.signature(getattr(fa3, name)).parameters.values()
    assert [(p.name, p.default) for p in params] == SIGNATURES[name]
    assert all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params)
    assert getattr(fa3, name).__doc__, f"{name} has no docstring"


def test_func_returns_as_fa3():
    rng = np.random.default_rng(1)
    q, k, v = randn(rng, 2, 9, 4, 32), randn(rng, 2, 13, 2, 32), randn(rng, 2, 13, 2, 32)
    out = fa3.flash_attn_func(q, k, v, causal=True, window_size=(5, 0), softcap=3.0)
    expected = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(5, 0), softcap=3.0)
    np.testing.assert_array_equal(out, expected)
    result = fa3.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert isinstance(result, tuple) and len(result) == 2  # (out, softmax_lse): no S_dmask in FA3
    exact, exact_lse, _ = reference.attention_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=True)
    assert max_abs_diff(result[0], exact) < 1e-5 and max_abs_diff(result[1], exact_lse) < 1e-5
    assert result[1].shape == (2, 4, 9) and result[1].dtype == np.float32


def test_varlen_returns_as_fa3():
    rng = np.random.default_rng(2)
    cu_q, cu_k = np.array([0, 4, 11], np.int32), np.array([0, 6, 16], np.int32)
    q, k, v = randn(rng, 11, 4, 16), randn(rng, 16, 2, 16), randn(rng, 16, 2, 16)
    used = np.array([3, 10], np.int32)
    out, lse = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 10, seqused_k=used, causal=True,
                                          return_attn_probs=True)
    exact, exact_lse = reference.varlen_attention_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_q, cu_k,
                                                            seqused_k=used, causal=True)
    assert max_abs_diff(out, exact) < 1e-5 and max_abs_diff(lse, exact_lse) < 1e-5
    assert lse.shape == (4, 11)
    # max_seqlen None: derived from the host cu_seqlens
    np.testing.assert_array_equal(fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, None, None, seqused_k=used,
                                                             causal=True), out)


def test_qkvpacked_both_layouts():
    rng = np.random.default_rng(3)
    qkv = randn(rng, 2, 10, 3, 2, 16)
    out = fa3.flash_attn_qkvpacked_func(qkv, causal=True)
    np.testing.assert_array_equal(out, flashattn.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                                                                 causal=True))
    gqa = randn(rng, 2, 10, 4 + 2 * 2, 16)  # 4 query heads, 2 key heads, 2 value heads
    out, lse = fa3.flash_attn_qkvpacked_func(gqa, num_heads_q=4, return_attn_probs=True)
    expected = flashattn.flash_attn_func(gqa[:, :, :4], gqa[:, :, 4:6], gqa[:, :, 6:])
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(TypeError, match="argument 'num_heads_q'"):
        fa3.flash_attn_qkvpacked_func(gqa)
    with pytest.raises(ValueError, match="argument 'num_heads_q'"):
        fa3.flash_attn_qkvpacked_func(gqa, num_heads_q=3)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_returns_as_fa3(paged):
    rng = np.random.default_rng(4)
    batch, capacity, page = 2, 32, 8
    q = randn(rng, batch, 1, 4, 32)
    k_new, v_new = randn(rng, batch, 1, 2, 32), randn(rng, batch, 1, 2, 32)
    lens = np.array([5, 20], np.int32)
    k_cache, v_cache = randn(rng, batch, capacity, 2, 32), randn(rng, batch, capacity, 2, 32)
    k2, v2 = k_cache.copy(), v_cache.copy()
    kwargs, kwargs2 = {}, {}
    if paged:
        table = np.arange(batch * capacity // page, dtype=np.int32)[::-1].copy().reshape(batch, -1)
        k_cache = k_cache.reshape(-1, page, 2, 32)[table.reshape(-1).argsort()].copy()
        v_cache = v_cache.reshape(-1, page, 2, 32)[table.reshape(-1).argsort()].copy()
        k2, v2 = k_cache.copy(), v_cache.copy()
        kwargs, kwargs2 = dict(page_table=table), dict(block_table=table)
    metadata = fa3.get_scheduler_metadata(batch, 1, capacity, 4, 2, 32, lens, causal=True,
                                          page_size=page if paged else None)
    out = fa3.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, causal=True,
                                      scheduler_metadata=metadata, pack_gqa=True, sm_margin=8, max_seqlen_q=1,
                                      **kwargs)
    expected = flashattn.flash_attn_with_kvcache(q, k2, v2, k_new, v_new, cache_seqlens=lens, causal=True, **kwargs2)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(k_cache, k2)  # appended the same way
    result = fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens + 1, return_softmax_lse=True,
                                         **kwargs)
    assert isinstance(result, tuple) and len(result) == 4  # (out, lse, out_accum, lse_accum), as FA3
    assert result[1].shape == (batch, 4, 1) and result[2].size == 0 and result[3].size == 0


def test_combine_is_fa3s():
    assert fa3.flash_attn_combine is flashattn.flash_attn_combine
    rng = np.random.default_rng(5)
    out, lse = fa3.flash_attn_combine(randn(rng, 3, 2, 5, 4, 16), randn(rng, 3, 2, 5, 4))
    assert out.shape == (2, 5, 4, 16) and lse.shape == (2, 5, 4)


Q = np.ones((1, 4, 2, 16), np.float32)
CU = np.array([0, 4], np.int32)
CACHE = np.ones((1, 8, 2, 16), np.float32)
LENS = np.array([3], np.int32)
UNSUPPORTED = [
    ("qv", lambda: fa3.flash_attn_func(Q, Q, Q, qv=Q)),
    ("attention_chunk", lambda: fa3.flash_attn_func(Q, Q, Q, attention_chunk=128)),
    ("seqused_q", lambda: fa3.flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, CU, 4, 4, seqused_q=np.array([4]))),
    ("cu_seqlens_k_new", lambda: fa3.flash_attn_with_kvcache(Q, CACHE, CACHE, cu_seqlens_k_new=CU)),
    ("rotary_seqlens", lambda: fa3.flash_attn_with_kvcache(Q, CACHE, CACHE, rotary_seqlens=LENS)),
    ("qv", lambda: fa3.flash_attn_with_kvcache(Q, CACHE, CACHE, qv=Q)),
]


@pytest.mark.parametrize("argument,call", UNSUPPORTED, ids=[f"{a}-{i}" for i, (a, _) in enumerate(UNSUPPORTED)])
def test_unbuilt_features_are_refused_by_name(argument, call):
    with pytest.raises(flashattn.UnsupportedError) as info:
        call()
    assert info.value.argument == argument and f"argument '{argument}'" in str(info.value)
    assert isinstance(info.value, NotImplementedError) and isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("argument,kwargs,error", [
    ("sm_margin", dict(sm_margin=-1), ValueError),
    ("sm_margin", dict(sm_margin=None), TypeError),
    ("attention_chunk", dict(attention_chunk=-5), ValueError),
    ("window_size", dict(window_size=None), TypeError),
    ("num_splits", dict(num_splits=2**40), ValueError),
])
def test_bad_hints_name_the_argument(argument, kwargs, error):
    with pytest.raises(error, match=f"argument '{argument}'"):
        fa3.flash_attn_func(Q, Q, Q, **kwargs)


def test_hints_are_accepted():
    base = fa3.flash_attn_func(Q, Q, Q, causal=True)
    for kwargs in (dict(pack_gqa=True), dict(pack_gqa=False), dict(sm_margin=16), dict(num_splits=2),
                   dict(deterministic=True)):
        np.testing.assert_allclose(fa3.flash_attn_func(Q, Q, Q, causal=True, **kwargs), base, atol=1e-6)


def test_torch_autograd_matches_the_flash_attn_interface():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn((2, 11, 4, 32), generator=g, requires_grad=True) for _ in range(3))
    out, lse = fa3.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    expected = flashattn.flash_attn_func(q, k, v, causal=True)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    assert not lse.requires_grad and lse.shape == (2, 4, 11)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    cu = torch.tensor([0, 5, 11], dtype=torch.int32)
    qv, kv, vv = (x.detach()[0].clone().requires_grad_() for x in (q, k, v))
    out = fa3.flash_attn_varlen_func(qv, kv, vv, cu, cu, 6, 6, causal=True)
    (dq,) = torch.autograd.grad(out.sum(), (qv,))
    assert torch.isfinite(dq).all()
    metadata = fa3.get_scheduler_metadata(2, 1, 16, 4, 4, 32, torch.tensor([3, 4], dtype=torch.int32))
    assert metadata.dtype == torch.int32 and metadata.numel() == 0


def test_kvcache_leftpad_as_fa3():
    rng = np.random.default_rng(18)
    q, cache = randn(rng, 1, 1, 2, 16), randn(rng, 1, 8, 2, 16)
    pad, lens = np.array([2], np.int32), np.array([6], np.int32)
    out = fa3.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lens, cache_leftpad=pad)
    exact = flashattn.flash_attn_with_kvcache(q, cache[:, 2:], cache[:, 2:], cache_seqlens=lens - pad)
    np.testing.assert_allclose(out, exact, atol=1e-6)
    assert fa3.get_scheduler_metadata(1, 1, 8, 2, 2, 16, lens, cache_leftpad=pad).shape == (0,)


def test_kvcache_varlen_queries_as_fa3():
    """Speculative decoding rows of different lengths in one call equal each sequence alone."""
    rng = np.random.default_rng(20)
    lens_q, lens = [3, 1, 0, 2], np.array([5, 9, 2, 7], np.int32)
    cu = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    q, cache = randn(rng, int(cu[-1]), 4, 16), randn(rng, 4, 12, 2, 16)
    out, lse, *_ = fa3.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lens, cu_seqlens_q=cu, max_seqlen_q=3,
                                               causal=True, return_softmax_lse=True)
    assert out.shape == (6, 4, 16) and lse.shape == (4, 6)
    for b, n in enumerate(lens_q):
        if n == 0:
            continue
        alone, alone_lse, *_ = fa3.flash_attn_with_kvcache(q[None, cu[b]:cu[b + 1]], cache[b:b + 1], cache[b:b + 1],
                                                           cache_seqlens=lens[b:b + 1], causal=True,
                                                           return_softmax_lse=True)
        np.testing.assert_allclose(out[cu[b]:cu[b + 1]], alone[0], atol=1e-6)
        np.testing.assert_allclose(lse[:, cu[b]:cu[b + 1]], alone_lse[0], atol=1e-6)
