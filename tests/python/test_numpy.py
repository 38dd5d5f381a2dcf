"""numpy on the CPU backend against the numpy reference: every entry point and argument of the
flash_attn interface, the low-level numpy API (forward and backward), errors. Runs everywhere
(CI included); needs numpy and the built extension, not torch."""
from __future__ import annotations

import subprocess
import sys

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
from flashattn.bert_padding import index_first_axis, pad_input, unpad_input
from flashattn.rotary import apply_rotary_emb
from helpers import assert_within_rule, max_abs_diff, reference_grads, rounding_floor


def randn(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def check_against_reference(out, q, k, v, what="out", lse=None, **options):
    """out (and lse) vs the float64 reference, with the same-precision reference as the yardstick."""
    exact, exact_lse, _ = reference.attention_reference(*(x.astype(np.float64) for x in (q, k, v)), **options)
    low, low_lse, _ = reference.attention_reference(q, k, v, **options)
    assert out.shape == exact.shape and out.dtype == q.dtype
    scale = options.get("softmax_scale") or q.shape[-1] ** -0.5
    assert_within_rule(out, exact, low, rounding_floor(q.dtype, q, k, v, scale, exact), what)
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == exact_lse.shape
        lse_floor = rounding_floor(np.float32, q, k, v, scale, exact_lse[np.isfinite(exact_lse)])
        assert_within_rule(lse, exact_lse, low_lse, lse_floor, what + " lse")


def test_package_imports_without_torch_or_numpy():
    code = "import sys, flashattn; assert 'torch' not in sys.modules and 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# flash_attn_func and every option
# ---------------------------------------------------------------------------------------------
# (batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim, head_dim_v)
SHAPES = [
    (1, 1, 1, 1, 1, 8, 8),
    (2, 17, 17, 4, 4, 64, 64),
    (2, 33, 65, 4, 2, 32, 32),    # GQA, seqlen_q < seqlen_k
    (2, 65, 33, 4, 1, 40, 40),    # MQA, seqlen_q > seqlen_k: the first rows see nothing when causal
    (1, 5, 130, 2, 2, 128, 128),
    (2, 9, 11, 2, 2, 6, 6),       # head_dim not a multiple of 8: padded for the caller
    (1, 12, 12, 3, 3, 100, 100),
    (1, 7, 9, 2, 1, 256, 256),
]
OPTIONS = [
    dict(),
    dict(causal=True),
    dict(window_size=(4, 2)),
    dict(causal=True, window_size=(5, -1)),
    dict(softcap=2.5),
    dict(softmax_scale=0.3, causal=True),
    dict(alibi="heads"),
    dict(alibi="batch_heads", causal=True),
]


def _alibi(kind, batch, heads, rng):
    if kind is None:
        return None
    shape = (heads,) if kind == "heads" else (batch, heads)
    return rng.uniform(0.05, 0.5, shape).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_func_matches_reference(shape, options):
    rng = np.random.default_rng(hash((shape, str(options))) % 2**32)
    b, sq, sk, hq, hk, d, dv = shape
    q, k, v = randn(rng, b, sq, hq, d), randn(rng, b, sk, hk, d), randn(rng, b, sk, hk, dv)
    options = dict(options)
    alibi = _alibi(options.pop("alibi", None), b, hq, rng)
    out, lse, probs = flash_attn_func(q, k, v, alibi_slopes=alibi, return_attn_probs=True, **options)
    # As flash_attn: no probabilities without dropout, an empty array in their place.
    assert probs.shape == (0,) and probs.dtype == q.dtype
    check_against_reference(out, q, k, v, lse=lse, alibi_slopes=alibi, **options)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_func_dtypes(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (randn(rng, 2, 40, 4, 64, dtype=dtype) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    check_against_reference(out, q, k, v, causal=True)


def test_float64_is_computed_in_float32():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 9, 2, 16)) for _ in range(3))
    out = flash_attn_func(q, k, v)
    exact, _, _ = reference.attention_reference(q, k, v)
    assert out.dtype == np.float64
    assert max_abs_diff(out, exact) < 1e-5


def test_num_splits_gives_the_same_attention():
    rng = np.random.default_rng(3)
    q, k, v = randn(rng, 2, 8, 4, 64), randn(rng, 2, 300, 2, 64), randn(rng, 2, 300, 2, 64)
    one = flash_attn_func(q, k, v, causal=True)
    for splits in (0, 3):
        np.testing.assert_allclose(flash_attn_func(q, k, v, causal=True, num_splits=splits), one, atol=2e-6)


def test_packed_variants_equal_unpacked():
    rng = np.random.default_rng(4)
    qkv = randn(rng, 2, 19, 3, 4, 32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    expected = flash_attn_func(q, k, v, causal=True)
    np.testing.assert_array_equal(flash_attn_qkvpacked_func(qkv, causal=True), expected)
    np.testing.assert_array_equal(flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True), expected)


def test_inputs_with_strides_are_read_in_place():
    rng = np.random.default_rng(5)
    big = randn(rng, 2, 4, 30, 64)  # (batch, heads, seqlen, d): a transposed view is (b, s, h, d)
    q = big.transpose(0, 2, 1, 3)
    out = flash_attn_func(q, q, q)
    check_against_reference(out, np.ascontiguousarray(q), q, q)


# ---------------------------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------------------------
def test_dropout_probs_encode_the_library_mask():
    rng = np.random.default_rng(6)
    b, s, h, d = 2, 33, 3, 32
    q, k, v = (randn(rng, b, s, h, d) for _ in range(3))
    p = 0.25
    np.random.seed(1234)
    out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=p, causal=True, return_attn_probs=True)
    # flash_attn's layout: seqlens rounded up to 128, zero outside the score matrix.
    assert s_dmask.shape == (b, h, 128, 128) and not s_dmask[:, :, s:].any() and not s_dmask[:, :, :, s:].any()
    s_dmask = s_dmask[:, :, :s, :s]
    np.random.seed(1234)
    out_again = flash_attn_func(q, k, v, dropout_p=p, causal=True)
    np.testing.assert_array_equal(out, out_again)  # np.random.seed makes dropout reproducible
    keep = s_dmask >= 0
    _, _, probs = reference.attention_reference(q.astype(np.float64), k, v, causal=True)
    np.testing.assert_allclose(np.abs(s_dmask), probs, atol=1e-6)
    exact, exact_lse, _ = reference.attention_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=True,
                                                        dropout_p=p, dropout_keep=keep)
    low, _, _ = reference.attention_reference(q, k, v, causal=True, dropout_p=p, dropout_keep=keep)
    assert_within_rule(out, exact, low, rounding_floor(np.float32, q, k, v / (1 - p), d ** -0.5, exact), "dropout out")
    np.testing.assert_allclose(lse, exact_lse, atol=1e-5)  # lse ignores dropout
    visible = np.tril(np.ones((s, s), dtype=bool))
    dropped = 1 - keep[:, :, visible].mean()
    assert abs(dropped - p) < 0.05


def test_dropout_mask_is_a_pure_function_of_seed_and_offset():
    a = numpy_api.dropout_mask(2, 3, 17, 19, 0.3, dropout_seed=42, dropout_offset=6)
    b = numpy_api.dropout_mask(2, 3, 17, 19, 0.3, dropout_seed=42, dropout_offset=6)
    c = numpy_api.dropout_mask(2, 3, 17, 19, 0.3, dropout_seed=43, dropout_offset=6)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


# ---------------------------------------------------------------------------------------------
# Backward (numpy has no autograd: the low-level API, against hand-derived reference gradients)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [
    dict(), dict(causal=True), dict(window_size=(3, 1)), dict(softcap=1.5), dict(alibi="heads", causal=True),
    dict(dropout_p=0.2), dict(deterministic=True, causal=True),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
@pytest.mark.parametrize("heads_k", [4, 1])
def test_bwd_matches_reference_gradients(options, heads_k):
    rng = np.random.default_rng(7)
    b, sq, sk, hq, d = 2, 21, 26, 4, 32
    q, k, v = randn(rng, b, sq, hq, d), randn(rng, b, sk, heads_k, d), randn(rng, b, sk, heads_k, d)
    dout = randn(rng, b, sq, hq, d)
    options = dict(options)
    alibi = _alibi(options.pop("alibi", None), b, hq, rng)
    deterministic = options.pop("deterministic", False)
    scale = d ** -0.5
    out, lse, rng_state = numpy_api.fwd(q, k, v, softmax_scale=scale, alibi_slopes=alibi, **options)
    dq, dk, dv = numpy_api.bwd(dout, q, k, v, out, lse, softmax_scale=scale, alibi_slopes=alibi,
                               rng_state=rng_state, deterministic=deterministic, **options)
    keep = None
    if options.get("dropout_p", 0) > 0:
        keep = numpy_api.dropout_mask(b, hq, sq, sk, options["dropout_p"], *rng_state).astype(bool)
    exact = reference_grads(q, k, v, dout, softmax_scale=scale, alibi_slopes=alibi, dropout_keep=keep, **options)
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), exact):
        assert got.shape == want.shape and got.dtype == np.float32
        # float32 gradients against float64: a few ulps of the gradient's magnitude.
        assert max_abs_diff(got, want) <= 1e-5 * max(1.0, np.abs(want).max()), name
    if deterministic:
        again = numpy_api.bwd(dout, q, k, v, out, lse, softmax_scale=scale, rng_state=rng_state,
                              deterministic=True, **options)
        for first, second in zip((dq, dk, dv), again):
            np.testing.assert_array_equal(first, second)


# ---------------------------------------------------------------------------------------------
# Varlen
# ---------------------------------------------------------------------------------------------
def _varlen_case(rng, lens_q, lens_k, hq=4, hk=2, d=32, dtype=np.float32):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, int(cu_q[-1]), hq, d, dtype=dtype)
    k = randn(rng, int(cu_k[-1]), hk, d, dtype=dtype)
    v = randn(rng, int(cu_k[-1]), hk, d, dtype=dtype)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(window_size=(2, 3)), dict(softcap=3.0),
                                     dict(alibi="batch_heads", causal=True)],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_varlen_matches_reference(options):
    rng = np.random.default_rng(8)
    lens_q, lens_k = [5, 0, 17, 1], [9, 4, 17, 30]  # an empty sequence; seqlen_q < seqlen_k
    q, k, v, cu_q, cu_k = _varlen_case(rng, lens_q, lens_k)
    options = dict(options)
    alibi = _alibi(options.pop("alibi", None), len(lens_q), q.shape[1], rng)
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), alibi_slopes=alibi,
                                         return_attn_probs=True, **options)
    exact, exact_lse = reference.varlen_attention_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_q, cu_k,
                                                            alibi_slopes=alibi, **options)
    low, _ = reference.varlen_attention_reference(q, k, v, cu_q, cu_k, alibi_slopes=alibi, **options)
    assert out.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])
    assert_within_rule(out, exact, low, rounding_floor(np.float32, q, k, v, q.shape[-1] ** -0.5, exact), "varlen out")
    np.testing.assert_allclose(lse, exact_lse, atol=1e-5)


def test_varlen_seqused_k():
    rng = np.random.default_rng(9)
    q, k, v, cu_q, cu_k = _varlen_case(rng, [3, 6], [10, 12])
    used = np.array([4, 12], dtype=np.int32)
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 12, causal=True, seqused_k=used)
    exact, _ = reference.varlen_attention_reference(q.astype(np.float64), k, v, cu_q, cu_k, seqused_k=used,
                                                    causal=True)
    assert max_abs_diff(out, exact) < 1e-5


def test_varlen_packed_variants_equal_unpacked():
    rng = np.random.default_rng(10)
    lens = [7, 13, 2]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    qkv = randn(rng, int(cu[-1]), 3, 2, 16)
    expected = flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 13, 13, causal=True)
    np.testing.assert_array_equal(flash_attn_varlen_qkvpacked_func(qkv, cu, 13, causal=True), expected)
    np.testing.assert_array_equal(flash_attn_varlen_kvpacked_func(qkv[:, 0], qkv[:, 1:], cu, cu, 13, 13, causal=True),
                                  expected)


def test_varlen_dropout_probs():
    rng = np.random.default_rng(11)
    q, k, v, cu_q, cu_k = _varlen_case(rng, [4, 9], [6, 9])
    out, _, s_dmask = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, dropout_p=0.3, return_attn_probs=True)
    assert s_dmask.shape == (2, 4, 128, 128)
    keep = s_dmask[:, :, :9, :9] >= 0
    exact, _ = reference.varlen_attention_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_q, cu_k,
                                                    dropout_p=0.3, dropout_keep=keep)
    assert max_abs_diff(out, exact) < 1e-5


def _page_table(rng, cu_k, page, spare=2):
    """A table of shuffled blocks, -1 past each sequence's last page."""
    lens = np.diff(cu_k)
    pages_per_seq = max(1, -(-int(lens.max()) // page))
    blocks = rng.permutation(len(lens) * pages_per_seq + spare).astype(np.int32).reshape(-1)
    table = blocks[:len(lens) * pages_per_seq].reshape(len(lens), pages_per_seq).copy()
    table[np.arange(pages_per_seq)[None, :] * page >= lens[:, None]] = -1
    return table, len(blocks)


def _paged(x, cu_k, page, table, num_blocks):
    """x (total_k, ...) scattered over the table's pages of `page` slots; NaN in every other slot."""
    pages = np.full((num_blocks, page) + x.shape[1:], np.nan, x.dtype)
    for b in range(len(cu_k) - 1):
        for j in range(int(cu_k[b + 1] - cu_k[b])):
            pages[table[b, j // page], j % page] = x[cu_k[b] + j]
    return pages


@pytest.mark.parametrize("page", [1, 16, 64])
def test_paged_varlen_equals_packed(page):
    """vLLM-style serving: decode rows, a prefill and a chunked prefill in one varlen batch over a
    paged cache give what the same batch gives with packed k/v."""
    rng = np.random.default_rng(12)
    q, k, v, cu_q, cu_k = _varlen_case(rng, [1, 9, 4, 1], [70, 9, 33, 1])
    table, blocks = _page_table(rng, cu_k, page)
    k_pages, v_pages = _paged(k, cu_k, page, table, blocks), _paged(v, cu_k, page, table, blocks)
    out, lse, _ = flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 9, 70, causal=True,
                                         return_attn_probs=True, block_table=table)
    expected, expected_lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 70, causal=True,
                                                       return_attn_probs=True)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(lse, expected_lse, atol=1e-6)


def test_paged_varlen_refuses_dropout_and_bad_tables():
    rng = np.random.default_rng(19)
    q, k, v, cu_q, cu_k = _varlen_case(rng, [2], [5])
    table, blocks = _page_table(rng, cu_k, 4)
    k_pages = _paged(k, cu_k, 4, table, blocks)
    with pytest.raises(flashattn.UnsupportedError, match="argument 'dropout_p'"):
        flash_attn_varlen_func(q, k_pages, k_pages, cu_q, cu_k, 2, 5, dropout_p=0.1, block_table=table)
    table[0, 1] = 99
    with pytest.raises(ValueError, match=r"argument 'block_table': entries for the pages in use"):
        flash_attn_varlen_func(q, k_pages, k_pages, cu_q, cu_k, 2, 5, block_table=table)
    with pytest.raises(ValueError, match=r"argument 'k': ndim must be 4 \(num_blocks, page_block_size"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 2, 5, block_table=table)


# ---------------------------------------------------------------------------------------------
# KV cache
# ---------------------------------------------------------------------------------------------
def _rotary_tables(rng, seqlen, rotary_dim):
    angles = rng.uniform(0, 2 * np.pi, (seqlen, rotary_dim // 2))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("layout", ["dense", "batch_idx", "paged"])
@pytest.mark.parametrize("rotary", [None, "neox", "interleaved"])
@pytest.mark.parametrize("head_dim", [32, 20])
def test_kvcache_append_and_attend(layout, rotary, head_dim):
    rng = np.random.default_rng(13)
    batch, hq, hk, d, capacity, seqlen_new, page = 3, 4, 2, head_dim, 40, 3, 8
    lens = np.array([5, 0, 29], dtype=np.int32)
    q = randn(rng, batch, seqlen_new, hq, d)
    k_new, v_new = randn(rng, batch, seqlen_new, hk, d), randn(rng, batch, seqlen_new, hk, d)
    # The logical cache: row b holds sequence b's keys.
    k_logical, v_logical = randn(rng, batch, capacity, hk, d), randn(rng, batch, capacity, hk, d)
    kwargs = {}
    if layout == "dense":
        k_cache, v_cache = k_logical.copy(), v_logical.copy()
    elif layout == "batch_idx":
        rows = np.array([4, 0, 2], dtype=np.int32)
        k_cache, v_cache = randn(rng, 5, capacity, hk, d), randn(rng, 5, capacity, hk, d)
        k_cache[rows], v_cache[rows] = k_logical, v_logical
        kwargs["cache_batch_idx"] = rows
    else:
        pages_per_seq = capacity // page
        table = rng.permutation(batch * pages_per_seq + 2)[:batch * pages_per_seq].reshape(batch, pages_per_seq)
        table = table.astype(np.int32)
        k_cache = randn(rng, batch * pages_per_seq + 2, page, hk, d)
        v_cache = randn(rng, batch * pages_per_seq + 2, page, hk, d)
        for b in range(batch):
            for j in range(pages_per_seq):
                k_cache[table[b, j]] = k_logical[b, j * page:(j + 1) * page]
                v_cache[table[b, j]] = v_logical[b, j * page:(j + 1) * page]
        kwargs["block_table"] = table
    cos = sin = None
    interleaved = rotary == "interleaved"
    if rotary:
        cos, sin = _rotary_tables(rng, capacity, 16)
        kwargs.update(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, causal=True,
                                       return_softmax_lse=True, **kwargs)

    # Expected: rotate k_new and q at their positions, append, attend causally over lens + new keys.
    k_rot, q_rot = k_new, q
    if rotary:
        k_rot = apply_rotary_emb(k_new, cos, sin, interleaved=interleaved, seqlen_offsets=lens)
        q_rot = apply_rotary_emb(q, cos, sin, interleaved=interleaved, seqlen_offsets=lens)
    for b in range(batch):
        n = lens[b]
        k_logical[b, n:n + seqlen_new], v_logical[b, n:n + seqlen_new] = k_rot[b], v_new[b]
        total = n + seqlen_new
        exact, exact_lse, _ = reference.attention_reference(q_rot[b:b + 1].astype(np.float64),
                                                            k_logical[b:b + 1, :total], v_logical[b:b + 1, :total],
                                                            causal=True)
        assert max_abs_diff(out[b:b + 1], exact) < 2e-5, f"sequence {b}"
        assert max_abs_diff(lse[b:b + 1], exact_lse) < 2e-5
    # The caller's cache holds the appended keys (also for head dims the library pads).
    if layout == "dense":
        np.testing.assert_allclose(k_cache, k_logical, atol=1e-6)
        np.testing.assert_allclose(v_cache, v_logical, atol=1e-6)
    elif layout == "batch_idx":
        np.testing.assert_allclose(k_cache[kwargs["cache_batch_idx"]], k_logical, atol=1e-6)
    else:
        for b in range(batch):
            got = np.concatenate([k_cache[p] for p in kwargs["block_table"][b]])
            np.testing.assert_allclose(got, k_logical[b], atol=1e-6)


def test_kvcache_int_cache_seqlens_and_no_append():
    rng = np.random.default_rng(14)
    q = randn(rng, 2, 1, 4, 64)
    k_cache, v_cache = randn(rng, 2, 16, 4, 64), randn(rng, 2, 16, 4, 64)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=11)
    exact, _, _ = reference.attention_reference(q.astype(np.float64), k_cache[:, :11], v_cache[:, :11])
    assert max_abs_diff(out, exact) < 1e-5
    whole = flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=4)  # no cache_seqlens: every slot
    exact, _, _ = reference.attention_reference(q.astype(np.float64), k_cache, v_cache)
    assert max_abs_diff(whole, exact) < 1e-5


@pytest.mark.parametrize("layout", ["dense", "paged"])
def test_kvcache_leftpad(layout):
    """Sequence b's keys are cache positions cache_leftpad[b] .. cache_seqlens[b] + seqlen_new - 1;
    rotary positions are cache positions. NaN in the padding and past the end never shows."""
    rng = np.random.default_rng(17)
    batch, hq, hk, d, capacity, seqlen_new, page = 3, 4, 2, 32, 24, 2, 4
    lens = np.array([10, 5, 20], dtype=np.int32)
    leftpad = np.array([0, 5, 9], dtype=np.int32)  # sequence 1: only the appended keys
    q = randn(rng, batch, seqlen_new, hq, d)
    k_new, v_new = randn(rng, batch, seqlen_new, hk, d), randn(rng, batch, seqlen_new, hk, d)
    k_logical, v_logical = randn(rng, batch, capacity, hk, d), randn(rng, batch, capacity, hk, d)
    for b in range(batch):
        for x in (k_logical, v_logical):
            x[b, :leftpad[b]] = np.nan
            x[b, lens[b]:] = np.nan
    kwargs = {}
    if layout == "dense":
        k_cache, v_cache = k_logical.copy(), v_logical.copy()
    else:
        pages_per_seq = capacity // page
        table = rng.permutation(batch * pages_per_seq).reshape(batch, pages_per_seq).astype(np.int32)
        k_cache, v_cache = np.empty((batch * pages_per_seq, page, hk, d), np.float32), None
        v_cache = np.empty_like(k_cache)
        for b in range(batch):
            for j in range(pages_per_seq):
                k_cache[table[b, j]] = k_logical[b, j * page:(j + 1) * page]
                v_cache[table[b, j]] = v_logical[b, j * page:(j + 1) * page]
        table[2, :leftpad[2] // page] = -1  # pages wholly inside the padding are never read
        kwargs["block_table"] = table
    cos, sin = _rotary_tables(rng, capacity, 16)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, cache_leftpad=leftpad,
                                       rotary_cos=cos, rotary_sin=sin, rotary_interleaved=False, causal=True,
                                       return_softmax_lse=True, **kwargs)
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    k_rot = apply_rotary_emb(k_new, cos, sin, interleaved=False, seqlen_offsets=lens)
    q_rot = apply_rotary_emb(q, cos, sin, interleaved=False, seqlen_offsets=lens)
    for b in range(batch):
        keys = np.concatenate([k_logical[b, leftpad[b]:lens[b]], k_rot[b]])[None]
        values = np.concatenate([v_logical[b, leftpad[b]:lens[b]], v_new[b]])[None]
        exact, exact_lse, _ = reference.attention_reference(q_rot[b:b + 1].astype(np.float64), keys, values,
                                                            causal=True)
        assert max_abs_diff(out[b:b + 1], exact) < 2e-5, f"sequence {b}"
        assert max_abs_diff(lse[b:b + 1], exact_lse) < 2e-5
    if layout == "dense":  # appended at the cache positions lens[b] .. lens[b] + 1
        for b in range(batch):
            np.testing.assert_allclose(k_cache[b, lens[b]:lens[b] + seqlen_new], k_rot[b], atol=1e-6)
            assert np.isnan(k_cache[b, :leftpad[b]]).all()


def test_kvcache_leftpad_errors_name_it():
    q = np.zeros((1, 1, 1, 8), np.float32)
    cache = np.zeros((1, 4, 1, 8), np.float32)
    with pytest.raises(ValueError, match=r"argument 'cache_leftpad': cache_leftpad\[b\] must be <= cache_seqlens"):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=np.array([2], np.int32),
                                cache_leftpad=np.array([3], np.int32))
    with pytest.raises(ValueError, match="argument 'cache_leftpad': dtype must be int32"):
        flash_attn_with_kvcache(q, cache, cache, cache_leftpad=np.zeros(1, np.float32))


# ---------------------------------------------------------------------------------------------
# Combine
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head_dim", [64, 12])
def test_combine_merges_key_splits(head_dim):
    rng = np.random.default_rng(15)
    b, s, h, d, sk = 2, 5, 3, head_dim, 30
    q, k, v = randn(rng, b, s, h, d), randn(rng, b, sk, h, d), randn(rng, b, sk, h, d)
    bounds = [0, 7, 18, 30]
    outs, lses = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        o, l, _ = flash_attn_func(q, k[:, lo:hi], v[:, lo:hi], return_attn_probs=True)
        outs.append(o)
        lses.append(l.transpose(0, 2, 1))  # FlashAttention-3's lse_partial layout (b, s, h)
    out, lse = flash_attn_combine(np.stack(outs), np.stack(lses))
    exact, exact_lse, _ = reference.attention_reference(*(x.astype(np.float64) for x in (q, k, v)))
    assert out.shape == (b, s, h, d) and lse.shape == (b, s, h)
    assert max_abs_diff(out, exact) < 1e-5
    assert max_abs_diff(lse, exact_lse.transpose(0, 2, 1)) < 1e-5
    out16, _ = flash_attn_combine(np.stack(outs), np.stack(lses), out_dtype=np.float16)
    assert out16.dtype == np.float16
    target = np.empty((b, s, h, d), np.float32)
    returned, _ = flash_attn_combine(np.stack(outs), np.stack(lses), out=target)
    assert returned is target and max_abs_diff(target, exact) < 1e-5


def test_combine_varlen_layout():
    rng = np.random.default_rng(16)
    out_partial = randn(rng, 2, 7, 2, 16)
    lse_partial = randn(rng, 2, 7, 2)
    out, lse = flash_attn_combine(out_partial, lse_partial)
    weights = np.exp(lse_partial - np.logaddexp(lse_partial[0], lse_partial[1])[None])
    np.testing.assert_allclose(out, (weights[..., None] * out_partial).sum(0), atol=1e-5)
    np.testing.assert_allclose(lse, np.logaddexp(lse_partial[0], lse_partial[1]), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Errors: the C++ layer's messages, as ValueError / TypeError
# ---------------------------------------------------------------------------------------------
def test_errors_carry_the_library_message():
    q = np.zeros((1, 4, 2, 64), np.float32)
    k = np.zeros((1, 4, 2, 32), np.float32)
    with pytest.raises(ValueError, match=r"argument 'k': .*head_dim of q \(64\), got 32") as info:
        flash_attn_func(q, k, k)
    assert info.value.argument == "k" and isinstance(info.value, flashattn.ArgumentError)
    with pytest.raises(ValueError, match="heads_k must divide heads_q"):
        flash_attn_func(np.zeros((1, 4, 3, 64), np.float32), q, q)
    with pytest.raises(TypeError, match=r"argument 'q': dtype must be float16, bfloat16, float32 or float8_e4m3fn, got int32"):
        flash_attn_func(q.astype(np.int32), q, q)
    with pytest.raises(TypeError, match=r"argument 'k': dtype must equal the dtype of 'q'"):
        flash_attn_func(q, q.astype(np.float16), q)
    with pytest.raises(ValueError, match=r"argument 'q': head_dim must be <= 256"):
        flash_attn_func(*(np.zeros((1, 2, 1, 300), np.float32),) * 3)
    with pytest.raises(ValueError, match="dropout"):
        flash_attn_func(q, q, q, dropout_p=1.5)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        flash_attn_varlen_func(q[0], q[0], q[0], np.array([0, 3, 2], np.int32), np.array([0, 2, 4], np.int32), 3, 2)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        flash_attn_varlen_func(q[0], q[0], q[0], np.array([0, 4], np.int64), np.array([0, 4], np.int32), 4, 4)


# ---------------------------------------------------------------------------------------------
# bert_padding and rotary on numpy
# ---------------------------------------------------------------------------------------------
def test_unpad_then_pad_round_trips():
    rng = np.random.default_rng(17)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=np.int32)
    hidden = randn(rng, 3, 5, 2, 4)
    packed, indices, cu, max_len, used = unpad_input(hidden, mask)
    assert packed.shape == (8, 2, 4) and max_len == 5
    np.testing.assert_array_equal(cu, [0, 3, 8, 8])
    np.testing.assert_array_equal(used, [3, 5, 0])
    np.testing.assert_array_equal(index_first_axis(hidden.reshape(15, 2, 4), indices), packed)
    back = pad_input(packed, indices, 3, 5)
    np.testing.assert_array_equal(back, hidden * mask[:, :, None, None])


def test_varlen_through_unpad_equals_masked_dense():
    """The Hugging Face path: unpad a padded batch, varlen attention, pad back."""
    rng = np.random.default_rng(18)
    mask = np.array([[1] * 6 + [0] * 3, [1] * 9], dtype=np.int32)  # right padding
    q, k, v = (randn(rng, 2, 9, 2, 16) for _ in range(3))
    q_u, idx, cu, max_len, _ = unpad_input(q, mask)
    k_u, _, _, _, _ = unpad_input(k, mask)
    v_u, _, _, _, _ = unpad_input(v, mask)
    out = pad_input(flash_attn_varlen_func(q_u, k_u, v_u, cu, cu, max_len, max_len, causal=True), idx, 2, 9)
    for b, n in enumerate(mask.sum(1)):
        exact, _, _ = reference.attention_reference(q[b:b + 1, :n].astype(np.float64), k[b:b + 1, :n],
                                                    v[b:b + 1, :n], causal=True)
        assert max_abs_diff(out[b:b + 1, :n], exact) < 1e-5
        assert not out[b, n:].any()


def test_rotary_varlen_matches_dense():
    rng = np.random.default_rng(19)
    x = randn(rng, 2, 6, 2, 16)
    cos, sin = _rotary_tables(rng, 10, 8)
    offsets = np.array([0, 3], np.int32)
    dense = apply_rotary_emb(x, cos, sin, seqlen_offsets=offsets)
    cu = np.array([0, 6, 12], np.int32)
    packed = apply_rotary_emb(x.reshape(12, 2, 16), cos, sin, seqlen_offsets=offsets, cu_seqlens=cu)
    np.testing.assert_allclose(packed.reshape(2, 6, 2, 16), dense, atol=1e-6)
    np.testing.assert_array_equal(dense[..., 8:], x[..., 8:])  # beyond rotary_dim: untouched
