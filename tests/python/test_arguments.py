"""Arguments of the public Python functions that are not arrays of the right shape: None, lists,
floats for ints, ints that do not fit the C API, read-only arrays, numpy mixed with torch. Each
must give the package's error (a ValueError or TypeError, also a RuntimeError as flash_attn's are)
naming the argument, never an AttributeError, ZeroDivisionError or nanobind's "incompatible
function arguments". Also: rows of a varlen q past cu_seqlens_q[-1] come back as zeros.
Runs with numpy alone; the torch cases skip without torch."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import flashattn
from flashattn import (
    flash_attn_combine,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
    numpy_api,
    reference,
)
from flashattn.bert_padding import pad_input, unpad_input
from flashattn import fa3_interface
from flashattn.interface import _flash_attn_backward
from flashattn.rotary import apply_rotary_emb


def arrays(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


Q = arrays(1, 4, 2, 16)
CU = np.array([0, 4], np.int32)
CACHE = arrays(1, 8, 2, 16, seed=1)
LENS = np.array([3], np.int32)

# (id, call, argument named, exception class)
CASES = [
    ("head_dim_0", lambda: flash_attn_func(*(np.zeros((1, 4, 2, 0), np.float32),) * 3), "q", ValueError),
    ("q_list", lambda: flash_attn_func(Q.tolist(), Q, Q), "q", TypeError),
    ("q_none", lambda: flash_attn_func(None, Q, Q), "q", TypeError),
    ("k_none", lambda: flash_attn_func(Q, None, Q), "k", TypeError),
    ("v_scalar", lambda: flash_attn_func(Q, Q, 1.0), "v", TypeError),
    ("q_object_dtype", lambda: flash_attn_func(Q.astype(object), Q, Q), "q", TypeError),
    ("k_str_dtype", lambda: flash_attn_func(Q, Q.astype(str), Q), "k", TypeError),
    ("v_big_endian", lambda: flash_attn_func(Q, Q, Q.astype(">f4")), "v", TypeError),
    ("q_ndim", lambda: flash_attn_func(Q[0], Q, Q), "q", ValueError),
    ("window_none", lambda: flash_attn_func(Q, Q, Q, window_size=None), "window_size", TypeError),
    ("window_huge", lambda: flash_attn_func(Q, Q, Q, window_size=(2**40, 0)), "window_size", ValueError),
    ("window_below_-1", lambda: flash_attn_func(Q, Q, Q, window_size=(-2, 0)), "window_size", ValueError),
    ("window_3", lambda: flash_attn_func(Q, Q, Q, window_size=(1, 2, 3)), "window_size", ValueError),
    ("window_float", lambda: flash_attn_func(Q, Q, Q, window_size=(1.5, 0)), "window_size", TypeError),
    ("window_str", lambda: flash_attn_func(Q, Q, Q, window_size="11"), "window_size", TypeError),
    ("dropout_none", lambda: flash_attn_func(Q, Q, Q, dropout_p=None), "dropout_p", TypeError),
    ("dropout_str", lambda: flash_attn_func(Q, Q, Q, dropout_p="0.1"), "dropout_p", TypeError),
    ("dropout_range", lambda: flash_attn_func(Q, Q, Q, dropout_p=1.0), "dropout_p", ValueError),
    ("scale_str", lambda: flash_attn_func(Q, Q, Q, softmax_scale="a"), "softmax_scale", TypeError),
    ("scale_nan", lambda: flash_attn_func(Q, Q, Q, softmax_scale=float("nan")), "softmax_scale", ValueError),
    ("softcap_none", lambda: flash_attn_func(Q, Q, Q, softcap=None), "softcap", TypeError),
    ("softcap_negative", lambda: flash_attn_func(Q, Q, Q, softcap=-1.0), "softcap", ValueError),
    ("causal_none", lambda: flash_attn_func(Q, Q, Q, causal=None), "causal", TypeError),
    ("deterministic_none", lambda: flash_attn_func(Q, Q, Q, deterministic=None), "deterministic", TypeError),
    ("return_probs_none", lambda: flash_attn_func(Q, Q, Q, return_attn_probs=None), "return_attn_probs",
     TypeError),
    ("num_splits_huge", lambda: flash_attn_func(Q, Q, Q, num_splits=2**40), "num_splits", ValueError),
    ("num_splits_float", lambda: flash_attn_func(Q, Q, Q, num_splits=2.0), "num_splits", TypeError),
    ("num_splits_negative", lambda: flash_attn_func(Q, Q, Q, num_splits=-1), "num_splits", ValueError),
    ("alibi_list", lambda: flash_attn_func(Q, Q, Q, alibi_slopes=[0.1, 0.2]), "alibi_slopes", TypeError),
    ("qkv_list", lambda: flash_attn_qkvpacked_func([[1.0]]), "qkv", TypeError),
    ("qkv_ndim", lambda: flash_attn_qkvpacked_func(Q), "qkv", ValueError),
    ("qkv_not_3", lambda: flash_attn_qkvpacked_func(arrays(1, 4, 2, 2, 16)), "qkv", ValueError),
    ("kv_none", lambda: flash_attn_kvpacked_func(Q, None), "kv", TypeError),
    ("kv_not_2", lambda: flash_attn_kvpacked_func(Q, arrays(1, 4, 3, 2, 16)), "kv", ValueError),
    # Head dims that pad to one size (20 and 21 both run as 24) still must match: the extra
    # column was dropped silently (test_fuzz.py, test_invalid_calls_raise_the_package_errors[23-dense]).
    ("k_head_dim_21", lambda: flash_attn_func(arrays(1, 4, 2, 20), arrays(1, 4, 2, 21), arrays(1, 4, 2, 20)), "k",
     ValueError),
    ("kvcache_k_cache_head_dim_21", lambda: flash_attn_with_kvcache(arrays(1, 1, 2, 20), arrays(1, 8, 2, 21),
                                                                    arrays(1, 8, 2, 20)), "k_cache", ValueError),
    ("kvcache_k_head_dim_21", lambda: flash_attn_with_kvcache(arrays(1, 1, 2, 20), arrays(1, 8, 2, 20),
                                                              arrays(1, 8, 2, 20), arrays(1, 1, 2, 21),
                                                              arrays(1, 1, 2, 20), cache_seqlens=3), "k", ValueError),
    ("kvcache_v_head_dim_21", lambda: flash_attn_with_kvcache(arrays(1, 1, 2, 20), arrays(1, 8, 2, 20),
                                                              arrays(1, 8, 2, 20), arrays(1, 1, 2, 20),
                                                              arrays(1, 1, 2, 21), cache_seqlens=3), "v", ValueError),
    ("backward_out_head_dim_21", lambda: _flash_attn_backward(
        arrays(1, 4, 2, 20), arrays(1, 4, 2, 20), arrays(1, 4, 2, 20), arrays(1, 4, 2, 20), arrays(1, 4, 2, 21),
        np.zeros((1, 2, 4), np.float32), None, None, None, 0.0, 0.2, False, -1, -1, 0.0, None, False), "out",
     ValueError),
    # Errors the library raises name the argument as the caller passed it: k and v of
    # flash_attn_with_kvcache (the library's k_new, v_new), a packed kv, FA3's page_table
    # (test_fuzz.py, test_invalid_calls_raise_the_package_errors[25-kvcache]).
    ("kvcache_k_dtype", lambda: flash_attn_with_kvcache(Q, CACHE.copy(), CACHE.copy(), Q[:, :1].astype(np.uint8),
                                                        Q[:, :1], cache_seqlens=3), "k", TypeError),
    ("kvcache_v_batch", lambda: flash_attn_with_kvcache(Q, CACHE.copy(), CACHE.copy(), Q[:, :1],
                                                        arrays(2, 1, 2, 16), cache_seqlens=3), "v", ValueError),
    ("kvpacked_kv_batch", lambda: flash_attn_kvpacked_func(Q, arrays(2, 4, 2, 2, 16)), "kv", ValueError),
    ("fa3_page_table_range", lambda: fa3_interface.flash_attn_with_kvcache(
        Q, CACHE, CACHE, cache_seqlens=3, page_table=np.array([[5]], np.int32)), "page_table", ValueError),
    # varlen
    ("cu_list", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], [0, 4], CU, 4, 4), "cu_seqlens_q", TypeError),
    ("cu_k_none", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, None, 4, 4), "cu_seqlens_k", TypeError),
    ("max_seqlen_float", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, CU, 4.5, 4), "max_seqlen_q",
     TypeError),
    ("max_seqlen_negative", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, CU, 4, -1), "max_seqlen_k",
     ValueError),
    ("max_seqlen_huge", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, CU, 2**31, 4), "max_seqlen_q",
     ValueError),
    ("varlen_dense_q", lambda: flash_attn_varlen_func(Q, Q[0], Q[0], CU, CU, 4, 4), "q", ValueError),
    ("seqused_list", lambda: flash_attn_varlen_func(Q[0], Q[0], Q[0], CU, CU, 4, 4, seqused_k=[4]), "seqused_k",
     TypeError),
    ("varlen_qkv_ndim", lambda: flash_attn_varlen_qkvpacked_func(Q, CU, 4), "qkv", ValueError),
    ("varlen_kv_list", lambda: flash_attn_varlen_kvpacked_func(Q[0], [1], CU, CU, 4, 4), "kv", TypeError),
    # kv cache
    ("kcache_none", lambda: flash_attn_with_kvcache(Q, None, CACHE), "k_cache", TypeError),
    ("cache_seqlens_list", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, cache_seqlens=[3]), "cache_seqlens",
     TypeError),
    ("cache_seqlens_negative", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, cache_seqlens=-1),
     "cache_seqlens", ValueError),
    ("cache_seqlens_huge", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, cache_seqlens=2**40), "cache_seqlens",
     ValueError),
    ("cache_seqlens_float", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, cache_seqlens=3.0), "cache_seqlens",
     TypeError),
    ("k_without_v", lambda: flash_attn_with_kvcache(Q, CACHE.copy(), CACHE.copy(), Q), "v", TypeError),
    ("block_table_list", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, block_table=[[0]]), "block_table",
     TypeError),
    ("rotary_list", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, rotary_cos=[[1.0]]), "rotary_cos",
     TypeError),
    ("kvcache_window_none", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, window_size=None), "window_size",
     TypeError),
    ("kvcache_num_splits_huge", lambda: flash_attn_with_kvcache(Q, CACHE, CACHE, num_splits=2**35), "num_splits",
     ValueError),
    ("kvcache_head_dim_0", lambda: flash_attn_with_kvcache(np.zeros((1, 1, 2, 0), np.float32), CACHE, CACHE), "q",
     ValueError),
    # combine
    ("combine_list", lambda: flash_attn_combine([[1.0]], np.zeros((2, 4, 2), np.float32)), "out_partial",
     TypeError),
    ("combine_lse_none", lambda: flash_attn_combine(arrays(2, 4, 2, 16), None), "lse_partial", TypeError),
    ("combine_out_dtype", lambda: flash_attn_combine(arrays(2, 4, 2, 16), arrays(2, 4, 2), out_dtype="float99"),
     "out_dtype", TypeError),
    ("combine_ndim", lambda: flash_attn_combine(arrays(2, 4, 16), arrays(2, 4)), "out_partial", ValueError),
    # the low-level numpy API
    ("numpy_fwd_list", lambda: numpy_api.fwd(Q.tolist(), Q, Q), "q", TypeError),
    ("numpy_fwd_window", lambda: numpy_api.fwd(Q, Q, Q, window_size=None), "window_size", TypeError),
    ("numpy_bwd_rng", lambda: numpy_api.bwd(Q, Q, Q, Q, Q, np.zeros((1, 2, 4), np.float32), rng_state=None),
     "rng_state", TypeError),
    ("numpy_kvcache_list", lambda: numpy_api.fwd_kvcache(Q, CACHE, CACHE, cache_seqlens=[3]), "cache_seqlens",
     TypeError),
    ("numpy_dropout_mask_float", lambda: numpy_api.dropout_mask(1, 2, 3.5, 4, 0.1, 7), "seqlen_q", TypeError),
    ("numpy_dropout_mask_seed", lambda: numpy_api.dropout_mask(1, 2, 3, 4, 0.1, -7), "dropout_seed", ValueError),
    # package-level settings
    ("threads_str", lambda: flashattn.set_cpu_threads("a"), "threads", TypeError),
    ("threads_huge", lambda: flashattn.set_cpu_threads(2**40), "threads", ValueError),
    ("device_none", lambda: flashattn.device_info(None), "device", TypeError),
    # padding and rotary helpers
    ("unpad_list", lambda: unpad_input(Q, [[1, 1, 1, 1]]), "attention_mask", TypeError),
    ("pad_none", lambda: pad_input(None, np.arange(4), 1, 4), "hidden_states", TypeError),
    ("rotary_x_list", lambda: apply_rotary_emb(Q.tolist(), np.ones((4, 4), np.float32),
                                               np.zeros((4, 4), np.float32)), "x", TypeError),
    ("rotary_too_wide", lambda: apply_rotary_emb(Q, np.ones((4, 16), np.float32), np.zeros((4, 16), np.float32)),
     "cos", ValueError),
    ("rotary_offsets_float", lambda: apply_rotary_emb(Q, np.ones((8, 4), np.float32), np.zeros((8, 4), np.float32),
                                                      seqlen_offsets=1.5), "seqlen_offsets", TypeError),
]


@pytest.mark.parametrize("call,argument,error", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_names_the_argument(call, argument, error):
    with pytest.raises(error) as info:
        call()
    e = info.value
    assert isinstance(e, flashattn.FlashAttnError) and isinstance(e, RuntimeError), type(e).__mro__
    assert e.argument == argument, (e.argument, str(e))
    assert f"argument '{argument}'" in str(e), str(e)
    assert "incompatible function arguments" not in str(e)


def test_numpy_and_torch_are_not_mixed():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"argument 'k': must be a numpy.ndarray like 'q'"):
        flash_attn_func(Q, torch.from_numpy(Q), Q)
    with pytest.raises(TypeError, match=r"argument 'cu_seqlens_q': must be a torch.Tensor like 'q'"):
        t = torch.from_numpy(Q[0])
        flash_attn_varlen_func(t, t, t, CU, torch.from_numpy(CU), 4, 4)


def test_torch_arguments_name_the_argument():
    torch = pytest.importorskip("torch")
    q = torch.from_numpy(Q)
    cu = torch.from_numpy(CU)
    with pytest.raises(TypeError, match=r"argument 'window_size'"):
        flash_attn_func(q, q, q, window_size=None)
    with pytest.raises(ValueError, match=r"argument 'q': head_dim \(the last dim\) must be >= 1"):
        z = torch.zeros((1, 4, 2, 0))
        flash_attn_func(z, z, z)
    with pytest.raises(TypeError, match=r"argument 'cu_seqlens_k'"):
        flash_attn_varlen_func(q[0], q[0], q[0], cu, [0, 4], 4, 4)
    # A one-element integer tensor is an int (Transformers passes max_seqlen that way).
    out = flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, cu.diff().max(), torch.tensor(4))
    assert out.shape == (4, 2, 16)


def test_read_only_cache_is_accepted_without_appending():
    k_cache, v_cache = CACHE.copy(), arrays(1, 8, 2, 16, seed=2)
    for cache in (k_cache, v_cache):
        cache.flags.writeable = False
    out = flash_attn_with_kvcache(Q, k_cache, v_cache, cache_seqlens=5, causal=True)
    exact, _, _ = reference.attention_reference(Q.astype(np.float64), k_cache[:, :5], v_cache[:, :5], causal=True)
    assert np.abs(out - exact).max() < 1e-5
    # Appending writes into the cache: a read-only one is refused, naming it.
    with pytest.raises(ValueError, match=r"argument 'k_cache': must be writable when k/v are appended"):
        flash_attn_with_kvcache(Q, k_cache, v_cache, Q, Q, cache_seqlens=LENS)
    # Odd head dims (padded for the library) too.
    odd = k_cache[..., :12]
    out = flash_attn_with_kvcache(Q[..., :12], odd, odd, cache_seqlens=5)
    assert out.shape == (1, 4, 2, 12)


def test_read_only_inputs_are_accepted():
    q = Q.copy()
    q.flags.writeable = False
    out, lse, _ = numpy_api.fwd(q, q, q)
    assert out.shape == Q.shape and np.isfinite(lse).all()


# ---------------------------------------------------------------------------------------------
# Rows of a varlen q past cu_seqlens_q[-1]
# ---------------------------------------------------------------------------------------------
def _dirty_heap(nbytes: int) -> None:
    """Leaves freed, NaN-filled memory of about nbytes behind, so that an output the library does
    not write would likely read NaN rather than fresh zeros."""
    junk = [np.full(nbytes // 4 + n, np.nan, np.float32) for n in range(0, 64, 8)]
    del junk
    gc.collect()


def test_varlen_rows_past_the_last_sequence_are_zero():
    rng = np.random.default_rng(20)
    lens = [3, 5]
    cu = np.array([0, 3, 8], np.int32)
    total_q = 13  # 5 rows past cu[-1]
    q = rng.standard_normal((total_q, 2, 16)).astype(np.float32)
    k = rng.standard_normal((8, 2, 16)).astype(np.float32)
    for _ in range(3):
        _dirty_heap(total_q * 2 * 16 * 4)
        out, lse, _ = flash_attn_varlen_func(q, k, k, cu, cu, max(lens), max(lens), causal=True,
                                             return_attn_probs=True)
        assert (out[8:] == 0).all(), out[8:]
        assert np.isneginf(lse[:, 8:]).all(), lse[:, 8:]
        exact, exact_lse = reference.varlen_attention_reference(q.astype(np.float64), k, k, cu, cu, causal=True)
        assert np.abs(out - exact).max() < 1e-5
    # The backward through the low-level API: those rows have no gradient.
    out, lse, rng_state = numpy_api.fwd(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5)
    _dirty_heap(total_q * 2 * 16 * 4)
    dq, dk, dv = numpy_api.bwd(np.ones_like(out), q, k, k, out, lse, cu_seqlens_q=cu, cu_seqlens_k=cu,
                               max_seqlen_q=5, max_seqlen_k=5, rng_state=rng_state)
    assert (dq[8:] == 0).all() and np.isfinite(dq).all()


def test_varlen_rows_past_the_last_sequence_are_zero_torch():
    torch = pytest.importorskip("torch")
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    q = torch.randn((13, 2, 16), requires_grad=True)
    k = torch.randn((10, 2, 16), requires_grad=True)  # keys past cu[-1] too
    out, lse, _ = flash_attn_varlen_func(q, k, k, cu, cu, 5, 5, return_attn_probs=True)
    assert (out[8:] == 0).all() and torch.isneginf(lse[:, 8:]).all()
    dq, dk = torch.autograd.grad(out.sum(), (q, k))
    assert (dq[8:] == 0).all() and (dk[8:] == 0).all()
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all()
