"""flash_attn details that code relies on beyond the main functions: the private
_flash_attn_forward/_backward (and varlen) entries ring-attention libraries call, inputs with a
strided last dim, flash_attn.layers.rotary (float32 math, the in-place variants, RotaryEmbedding),
bert_padding.unpad_input_for_concatenated_sequences. numpy everywhere; torch cases skip without it."""
from __future__ import annotations

import numpy as np
import pytest

from flashattn import flash_attn_func, flash_attn_varlen_func, numpy_api, reference
from flashattn.bert_padding import unpad_input_for_concatenated_sequences
from flashattn.interface import (
    _flash_attn_backward,
    _flash_attn_forward,
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
)
from flashattn.rotary import apply_rotary_emb, apply_rotary_emb_kv_, apply_rotary_emb_qkv_
from helpers import max_abs_diff, reference_grads


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Strided last dims are copied, as flash_attn does, not refused
# ---------------------------------------------------------------------------------------------
def test_strided_last_dim_numpy():
    rng = np.random.default_rng(1)
    big = randn(rng, 2, 9, 3, 64)
    q, k, v = big[..., ::2], big[..., 1::2], big[:, ::-1, :, ::2]  # last-dim stride 2
    assert q.strides[-1] != q.itemsize
    out = flash_attn_func(q, k, v, causal=True)
    expected = flash_attn_func(*(np.ascontiguousarray(x) for x in (q, k, v)), causal=True)
    np.testing.assert_array_equal(out, expected)
    cu = np.array([0, 4, 9], np.int32)
    out = flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 5, 5)
    np.testing.assert_array_equal(out, flash_attn_varlen_func(*(np.ascontiguousarray(x[0]) for x in (q, k, v)),
                                                              cu, cu, 5, 5))
    strided_cu = np.array([0, -1, 4, -1, 9, -1], np.int32)[::2]  # cu_seqlens too
    np.testing.assert_array_equal(flash_attn_varlen_func(q[0], k[0], v[0], strided_cu, strided_cu, 5, 5), out)


def test_strided_last_dim_torch_with_gradients():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(2)
    base = torch.randn((2, 9, 3, 64), generator=g, requires_grad=True)
    q, k, v = base[..., ::2], base[..., 1::2], base[..., ::2].flip(1)
    out = flash_attn_func(q, k, v, causal=True)
    (grad,) = torch.autograd.grad(out.square().sum(), (base,))
    leaf = base.detach().clone().requires_grad_()
    q2, k2, v2 = (x.contiguous() for x in (leaf[..., ::2], leaf[..., 1::2], leaf[..., ::2].flip(1)))
    expected = flash_attn_func(q2, k2, v2, causal=True)
    (grad2,) = torch.autograd.grad(expected.square().sum(), (leaf,))
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    torch.testing.assert_close(grad, grad2, atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------
# flash_attn 2.7's private entries
# ---------------------------------------------------------------------------------------------
def _softmax_d_dense(dout, out):
    d = (dout.astype(np.float32) * out.astype(np.float32)).sum(-1).transpose(0, 2, 1)  # (b, h, s)
    padded = np.zeros(d.shape[:2] + (-(-d.shape[2] // 128) * 128,), np.float32)
    padded[..., :d.shape[2]] = d
    return padded


@pytest.mark.parametrize("head_dim", [32, 20])
def test_private_forward_backward_numpy(head_dim):
    rng = np.random.default_rng(3)
    b, sq, sk, hq, hk = 2, 11, 14, 4, 2
    q, k, v = randn(rng, b, sq, hq, head_dim), randn(rng, b, sk, hk, head_dim), randn(rng, b, sk, hk, head_dim)
    scale = 0.2
    out, lse, s_dmask, rng_state = _flash_attn_forward(q, k, v, 0.0, scale, True, -1, -1, 0.0, None, False)
    expected_out, expected_lse, _ = flash_attn_func(q, k, v, softmax_scale=scale, causal=True,
                                                    return_attn_probs=True)
    np.testing.assert_array_equal(out, expected_out)
    np.testing.assert_array_equal(lse, expected_lse)
    assert s_dmask.shape == (0,) and rng_state.shape == (2,)
    dout = randn(rng, b, sq, hq, head_dim)
    dq, dk, dv = np.full_like(q, np.nan), np.full_like(k, np.nan), np.full_like(v, np.nan)
    softmax_d = _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, scale, True, -1, -1, 0.0, None,
                                     False, rng_state)
    exact = reference_grads(q, k, v, dout, softmax_scale=scale, causal=True)
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), exact):
        assert max_abs_diff(got, want) <= 1e-5 * max(1.0, np.abs(want).max()), name
    assert softmax_d.shape == (b, hq, 128)
    np.testing.assert_allclose(softmax_d, _softmax_d_dense(dout, out), rtol=1e-6, atol=1e-6)


def test_private_varlen_numpy_with_dropout():
    rng = np.random.default_rng(4)
    cu_q = np.array([0, 3, 10], np.int32)
    cu_k = np.array([0, 6, 12], np.int32)
    q, k, v = randn(rng, 10, 2, 16), randn(rng, 12, 2, 16), randn(rng, 12, 2, 16)
    p = 0.3
    out, lse, s_dmask, rng_state = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, 7, 6, p, None, False,
                                                              return_softmax=True)
    assert s_dmask.shape == (2, 2, 128, 128)
    keep = s_dmask[:, :, :7, :6] >= 0
    exact, _ = reference.varlen_attention_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_q, cu_k,
                                                    dropout_p=p, dropout_keep=keep)
    assert max_abs_diff(out, exact) < 1e-5
    dout = randn(rng, 10, 2, 16)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    softmax_d = _flash_attn_varlen_backward(dout, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, 7, 6, p, None, False,
                                            -1, -1, 0.0, None, False, rng_state)
    expected = numpy_api.bwd(dout, q, k, v, out, lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=7,
                             max_seqlen_k=6, softmax_scale=16 ** -0.5, dropout_p=p,
                             rng_state=tuple(int(x) for x in rng_state))
    for got, want in zip((dq, dk, dv), expected):
        np.testing.assert_array_equal(got, want)
    # flash_attn's varlen layout: (nheads, total_q + 128 * batch), row i of sequence b at
    # column cu_q[b] + 128 * b + i.
    assert softmax_d.shape == (2, 10 + 128 * 2)
    d = (dout * out).sum(-1).T
    np.testing.assert_allclose(softmax_d[:, 0:3], d[:, 0:3], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(softmax_d[:, 131:138], d[:, 3:10], rtol=1e-6, atol=1e-6)
    assert not softmax_d[:, 3:131].any()
    with pytest.raises(TypeError, match="argument 'rng_state'"):
        _flash_attn_varlen_backward(dout, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, 7, 6, p, None, False, -1, -1,
                                    0.0, None, False)


def test_private_entries_torch_match_autograd():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn((2, 13, 4, 32), generator=g, requires_grad=True) for _ in range(3))
    p, scale = 0.2, 0.3
    torch.manual_seed(11)
    out, lse, s_dmask, rng_state = _flash_attn_forward(q, k, v, p, scale, True, 4, 0, 0.0, None, True)
    assert not out.requires_grad and s_dmask.shape == (2, 4, 128, 128) and rng_state.dtype == torch.int64
    torch.manual_seed(11)
    expected = flash_attn_func(q, k, v, dropout_p=p, softmax_scale=scale, causal=True, window_size=(4, 0))
    torch.testing.assert_close(out, expected.detach(), atol=0, rtol=0)
    dout = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad(expected, (q, k, v), dout)
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    softmax_d = _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, p, scale, True, 4, 0, 0.0, None, False,
                                     rng_state)
    for got, want in zip((dq, dk, dv), grads):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    torch.testing.assert_close(softmax_d[:, :, :13], (dout * out).sum(-1).transpose(1, 2))
    assert softmax_d.shape == (2, 4, 128) and not softmax_d[:, :, 13:].any()
    # varlen, torch: softmax_d columns follow cu_seqlens_q + 128 * b
    cu = torch.tensor([0, 5, 13], dtype=torch.int32)
    qv, kv, vv = (x.detach()[0] for x in (q, k, v))
    out, lse, _, rng_state = _flash_attn_varlen_forward(qv, kv, vv, cu, cu, 8, 8, 0.0, None, False)
    dq = torch.empty_like(qv)
    softmax_d = _flash_attn_varlen_backward(dout[0], qv, kv, vv, out, lse, dq, None, None, cu, cu, 8, 8, 0.0, None,
                                            False, -1, -1, 0.0, None, False, rng_state)
    d = (dout[0] * out).sum(-1).t()
    torch.testing.assert_close(softmax_d[:, 128 + 5:128 + 13], d[:, 5:13])
    assert torch.isfinite(dq).all()


# ---------------------------------------------------------------------------------------------
# flash_attn.layers.rotary
# ---------------------------------------------------------------------------------------------
def _tables(torch, seqlen, half, dtype):
    angles = torch.outer(torch.arange(seqlen, dtype=torch.float64), torch.rand(half, dtype=torch.float64) + 0.1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_computes_in_float32(interleaved):
    torch = pytest.importorskip("torch")
    torch.manual_seed(6)
    x = torch.randn((2, 40, 3, 64)).to(torch.bfloat16)
    cos, sin = _tables(torch, 48, 16, torch.bfloat16)
    got = apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=3)
    # The same math in float32, rounded once to bfloat16 at the end: what upstream's kernel does.
    exact = apply_rotary_emb(x.float(), cos.float(), sin.float(), interleaved=interleaved, seqlen_offsets=3)
    torch.testing.assert_close(got, exact.to(torch.bfloat16), atol=0, rtol=0)
    assert got.dtype == torch.bfloat16


def test_rotary_qkv_and_kv_in_place_with_gradients():
    torch = pytest.importorskip("torch")
    torch.manual_seed(7)
    cos, sin = _tables(torch, 20, 8, torch.float32)
    qkv0 = torch.randn((2, 12, 3, 4, 32))
    offsets = torch.tensor([0, 5])
    for interleaved in (False, True):
        leaf = qkv0.clone().requires_grad_()
        qkv = leaf * 1.0  # a non-leaf, as the output of a projection would be
        result = apply_rotary_emb_qkv_(qkv, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
        assert result is qkv
        ref_leaf = qkv0.clone().requires_grad_()
        q_ref = apply_rotary_emb(ref_leaf[:, :, 0], cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
        k_ref = apply_rotary_emb(ref_leaf[:, :, 1], cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
        expected = torch.stack((q_ref, k_ref, ref_leaf[:, :, 2]), dim=2)
        torch.testing.assert_close(qkv, expected)
        weights = torch.randn(qkv.shape)
        (grad,) = torch.autograd.grad((qkv * weights).sum(), (leaf,))
        (grad_ref,) = torch.autograd.grad((expected * weights).sum(), (ref_leaf,))
        torch.testing.assert_close(grad, grad_ref)
    # GQA layout: (b, s, hq + 2 hk, d) with num_heads_q
    packed = torch.randn((2, 12, 4 + 2 * 2, 32))
    rotated = apply_rotary_emb_qkv_(packed.clone(), cos, sin, num_heads_q=4)
    torch.testing.assert_close(rotated[:, :, :4], apply_rotary_emb(packed[:, :, :4], cos, sin))
    torch.testing.assert_close(rotated[:, :, 4:6], apply_rotary_emb(packed[:, :, 4:6], cos, sin))
    torch.testing.assert_close(rotated[:, :, 6:], packed[:, :, 6:])
    kv = torch.randn((2, 12, 2, 4, 32))
    rotated = apply_rotary_emb_kv_(kv.clone(), cos, sin, seqlen_offsets=2)
    torch.testing.assert_close(rotated[:, :, 0], apply_rotary_emb(kv[:, :, 0], cos, sin, seqlen_offsets=2))
    torch.testing.assert_close(rotated[:, :, 1], kv[:, :, 1])


def test_rotary_in_place_numpy():
    rng = np.random.default_rng(8)
    angles = rng.uniform(0, 6, (16, 4))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    qkv = randn(rng, 1, 10, 3, 2, 8)
    expected_q = apply_rotary_emb(qkv[:, :, 0], cos, sin)
    result = apply_rotary_emb_qkv_(qkv, cos, sin)
    assert result is qkv
    np.testing.assert_allclose(qkv[:, :, 0], expected_q, atol=1e-6)


def test_rotary_embedding_module():
    torch = pytest.importorskip("torch")
    from flashattn.rotary import RotaryEmbedding

    torch.manual_seed(9)
    dim, seqlen = 16, 10
    module = RotaryEmbedding(dim, base=10000.0)
    qkv = torch.randn((2, seqlen, 3, 2, 32))
    out = module(qkv.clone(), seqlen_offset=3)
    positions = torch.arange(seqlen + 3, dtype=torch.float64)
    freqs = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(positions, freqs)
    cos, sin = angles.cos().float(), angles.sin().float()
    torch.testing.assert_close(out[:, :, 0], apply_rotary_emb(qkv[:, :, 0], cos, sin, seqlen_offsets=3))
    torch.testing.assert_close(out[:, :, 2], qkv[:, :, 2])
    q, kv = module(qkv[:, :, 0].clone(), kv=qkv[:, :, 1:].clone(), seqlen_offset=3)
    torch.testing.assert_close(q, out[:, :, 0])
    torch.testing.assert_close(kv[:, :, 0], out[:, :, 1])
    # XPos: q scaled up, k down, by the same factor: q.k is unchanged at equal positions.
    xpos = RotaryEmbedding(dim, scale_base=512)
    rotated = xpos(qkv.clone())
    assert not torch.allclose(rotated[:, :, 0], out[:, :, 0])


# ---------------------------------------------------------------------------------------------
# bert_padding.unpad_input_for_concatenated_sequences
# ---------------------------------------------------------------------------------------------
def test_unpad_input_for_concatenated_sequences():
    lengths = np.array([[2, 3, 0, 0, 0, 0], [3, 2, 0, 0, 0, 0], [6, 0, 0, 0, 0, 0]], np.int32)
    hidden = np.arange(3 * 6 * 2, dtype=np.float32).reshape(3, 6, 2)
    packed, indices, cu, max_len = unpad_input_for_concatenated_sequences(hidden, lengths)
    np.testing.assert_array_equal(cu, [0, 2, 5, 8, 10, 16])
    np.testing.assert_array_equal(indices, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17])
    assert max_len == 6 and packed.shape == (16, 2)
    np.testing.assert_array_equal(packed, hidden.reshape(18, 2)[indices])
    torch = pytest.importorskip("torch")
    t_packed, t_indices, t_cu, t_max = unpad_input_for_concatenated_sequences(torch.from_numpy(hidden),
                                                                              torch.from_numpy(lengths))
    assert t_cu.dtype == torch.int32 and t_max == 6
    np.testing.assert_array_equal(t_cu.numpy(), cu)
    np.testing.assert_array_equal(t_packed.numpy(), packed)
    np.testing.assert_array_equal(t_indices.numpy(), indices)
