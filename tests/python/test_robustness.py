"""Regression tests for issue 18 on numpy arrays (the CPU backend): thread-count changes while calls
run, calls after fork(), bounded thread counts, NaN propagation, pages shared while appending and
empty problems."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flashattn
from flashattn import flash_attn_func


def run_script(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs script in a fresh interpreter: a crash or a hang fails the test, not the test run."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the script did not finish within {timeout} s (hung)")


def assert_script_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit code {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stdout.strip().endswith("ok"), result.stdout


# --- threads ---------------------------------------------------------------------------------

def test_raising_thread_count_while_calls_run_and_wait():
    # The repro: a long call runs on one thread, a short one starts, the count goes to 8.
    result = run_script("""
        import threading, time
        import numpy as np
        import flashattn
        from flashattn import flash_attn_func
        rng = np.random.default_rng(0)
        big = rng.standard_normal((2, 6000, 4, 64)).astype(np.float32)
        small = rng.standard_normal((4, 512, 4, 64)).astype(np.float32)
        expected_big = flash_attn_func(big, big, big)
        expected_small = flash_attn_func(small, small, small)
        for first in (1, 2):
            flashattn.set_cpu_threads(first)
            results = {}
            a = threading.Thread(target=lambda: results.update(big=flash_attn_func(big, big, big)))
            b = threading.Thread(target=lambda: results.update(small=flash_attn_func(small, small, small)))
            a.start(); time.sleep(0.05)
            b.start(); time.sleep(0.05)
            flashattn.set_cpu_threads(8)
            a.join(); b.join()
            assert np.array_equal(results["big"], expected_big)
            assert np.array_equal(results["small"], expected_small)
        print("ok")
    """)
    assert_script_ok(result)


def test_forked_children_finish_their_calls():
    # Calls in the parent start the pool's threads; children made by fork() must not wait for them.
    result = run_script("""
        import multiprocessing, os
        import numpy as np
        import flashattn
        from flashattn import flash_attn_func
        flashattn.set_cpu_threads(4)
        q = np.random.default_rng(1).standard_normal((2, 300, 4, 64)).astype(np.float32)
        expected = flash_attn_func(q, q, q, causal=True)

        def child_call(_):
            return flash_attn_func(q, q, q, causal=True)

        with multiprocessing.get_context("fork").Pool(2) as pool:
            for out in pool.map(child_call, range(4), chunksize=1):
                assert np.array_equal(out, expected)

        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(flash_attn_func(q, q, q, causal=True), expected)
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
        os.close(write_end)
        assert os.read(read_end, 1) == b"1"
        assert os.waitpid(pid, 0)[1] == 0
        print("ok")
    """, timeout=60)
    assert_script_ok(result)


def test_thread_count_is_bounded():
    before = flashattn.cpu_threads()
    try:
        for bad in (-1, 100000):
            with pytest.raises(flashattn.ArgumentError) as info:
                flashattn.set_cpu_threads(bad)
            assert info.value.argument == "threads"
            assert "must be in [0, " in str(info.value) and f"got {bad}" in str(info.value)
            assert flashattn.cpu_threads() == before
        flashattn.set_cpu_threads(3)
        assert flashattn.cpu_threads() == 3
    finally:
        flashattn.set_cpu_threads(0)


# --- NaN in, NaN out -------------------------------------------------------------------------

def _qkv(shape_q, shape_k, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in (shape_q, shape_k, shape_k))


def test_nan_in_q_makes_its_row_nan_and_nothing_else():
    q, k, v = _qkv((2, 150, 2, 64), (2, 150, 2, 64))
    clean_out, clean_lse, _ = flash_attn_func(q, k, v, return_attn_probs=True)
    q[1, 70, 1, 5] = np.nan
    out, lse, _ = flash_attn_func(q, k, v, return_attn_probs=True)
    assert np.isnan(out[1, 70, 1]).all() and np.isnan(lse[1, 1, 70])  # was: 0 and -inf
    out[1, 70, 1] = clean_out[1, 70, 1]
    lse[1, 1, 70] = clean_lse[1, 1, 70]
    assert np.array_equal(out, clean_out) and np.array_equal(lse, clean_lse)

    dout = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    out_nan, lse_nan, _ = flashattn.numpy_api.fwd(q, k, v)
    dq, dk, dv = flashattn.numpy_api.bwd(dout, q, k, v, out_nan, lse_nan)
    assert np.isnan(dq[1, 70, 1]).all()
    assert not np.isnan(np.delete(dq.reshape(-1, 64), (1 * 150 + 70) * 2 + 1, axis=0)).any()
    assert np.isnan(dk[1, :, 1]).all() and np.isnan(dv[1, :, 1]).all()  # every key the row sees
    assert not np.isnan(dk[0]).any() and not np.isnan(dk[1, :, 0]).any() and not np.isnan(dv[1, :, 0]).any()


def test_nan_alibi_slope_makes_its_head_nan():
    q, k, v = _qkv((2, 100, 4, 64), (2, 100, 4, 64))
    slopes = np.full(4, 0.25, dtype=np.float32)
    clean = flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    slopes[2] = np.nan
    out = flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    assert np.isnan(out[:, :, 2]).all()  # was: 0
    assert np.array_equal(np.delete(out, 2, axis=2), np.delete(clean, 2, axis=2))


@pytest.mark.parametrize("num_splits", [1, 3])
def test_nan_in_v_reaches_only_the_rows_that_see_it(num_splits):
    # Causal, sk > sq: key 250 is seen by rows 150.. only, though rows 0..127 load its key tile.
    q, k, v = _qkv((1, 200, 2, 64), (1, 300, 2, 64))
    clean = flash_attn_func(q, k, v, causal=True, num_splits=num_splits)
    v[0, 250, 1, 7] = np.nan
    out = flash_attn_func(q, k, v, causal=True, num_splits=num_splits)
    sees = np.arange(200) + 100 >= 250
    assert np.isnan(out[0, sees, 1, 7]).all()
    nan_expected = np.zeros(out.shape, dtype=bool)
    nan_expected[0, sees, 1, 7] = True
    assert np.array_equal(np.isnan(out), nan_expected)
    np.testing.assert_allclose(out[~nan_expected], clean[~nan_expected], rtol=1e-5, atol=1e-6)


# --- pages shared while appending ------------------------------------------------------------

def test_two_sequences_appending_into_one_page_are_rejected():
    from flashattn import flash_attn_with_kvcache
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 1, 2, 64)).astype(np.float32)
    k_cache = rng.standard_normal((2, 16, 2, 64)).astype(np.float32)
    v_cache = rng.standard_normal((2, 16, 2, 64)).astype(np.float32)
    k_new = rng.standard_normal((2, 1, 2, 64)).astype(np.float32)
    shared = np.array([[0], [0]], dtype=np.int32)
    lens = np.array([3, 5], dtype=np.int32)
    k_before, v_before = k_cache.copy(), v_cache.copy()
    with pytest.raises(flashattn.ArgumentError) as info:
        flash_attn_with_kvcache(q, k_cache, v_cache, k_new, k_new, cache_seqlens=lens, block_table=shared)
    assert info.value.argument == "block_table"
    assert "appended into must appear only once" in str(info.value)
    assert np.array_equal(k_cache, k_before) and np.array_equal(v_cache, v_before)  # nothing written

    # Reading a shared page (prefix sharing) stays allowed, and equals a dense cache.
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, block_table=shared)
    dense_k = np.repeat(k_cache[:1], 2, axis=0)
    dense_v = np.repeat(v_cache[:1], 2, axis=0)
    np.testing.assert_array_equal(out, flash_attn_with_kvcache(q, dense_k, dense_v, cache_seqlens=lens))

    # Appending into separate pages after a shared, full prefix page is fine too.
    k_pages = rng.standard_normal((3, 4, 2, 64)).astype(np.float32)
    table = np.array([[0, 1], [0, 2]], dtype=np.int32)
    flash_attn_with_kvcache(q, k_pages, k_pages.copy(), k_new, k_new, cache_seqlens=np.array([4, 4], np.int32),
                            block_table=table)


# --- empty problems --------------------------------------------------------------------------

def _randn(*shape, seed=3):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("empty", ["batch", "seqlen_q", "seqlen_k"])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_forward_and_backward(empty, causal):
    b, sq, sk = (0 if empty == "batch" else 2), (0 if empty == "seqlen_q" else 9), (0 if empty == "seqlen_k" else 7)
    q, k, v = _randn(b, sq, 4, 64), _randn(b, sk, 2, 64, seed=4), _randn(b, sk, 2, 64, seed=5)
    out, lse, _ = flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert out.shape == (b, sq, 4, 64) and lse.shape == (b, 4, sq)
    assert (out == 0).all() and (lse == -np.inf).all()  # vacuous unless seqlen_k is the empty one
    if empty == "seqlen_k":
        assert out.size > 0

    dq, dk, dv = flashattn.numpy_api.bwd(_randn(b, sq, 4, 64, seed=6), q, k, v, out, lse, causal=causal)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()
    if empty == "seqlen_q":
        assert dk.size > 0  # keys without queries get zero gradients


@pytest.mark.parametrize("empty", ["batch", "seqlen_q", "seqlen_k"])
def test_empty_forward_with_dropout_probs(empty):
    # S_dmask comes from the reference's probabilities, whose row max over no keys raised numpy's
    # "zero-size array to reduction operation" (test_fuzz.py, test_valid_dense_forward[16]).
    b, sq, sk = (0 if empty == "batch" else 2), (0 if empty == "seqlen_q" else 9), (0 if empty == "seqlen_k" else 7)
    q, k, v = _randn(b, sq, 4, 64), _randn(b, sk, 2, 64, seed=4), _randn(b, sk, 2, 64, seed=5)
    out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=0.3, return_attn_probs=True)
    assert out.shape == (b, sq, 4, 64) and lse.shape == (b, 4, sq) and s_dmask.shape[:2] == (b, 4)
    assert (out == 0).all() and (lse == -np.inf).all() and (s_dmask == 0).all()


@pytest.mark.parametrize("empty", ["rows", "keys"])
def test_empty_varlen(empty):
    from flashattn import flash_attn_varlen_func
    cu = np.array([0, 3, 8], dtype=np.int32)
    none = np.zeros(3, dtype=np.int32)
    rows, keys = (0, 8) if empty == "rows" else (8, 0)
    out = flash_attn_varlen_func(_randn(rows, 4, 64), _randn(keys, 4, 64), _randn(keys, 4, 64),
                                 none if empty == "rows" else cu, none if empty == "keys" else cu,
                                 5 if rows else 0, 5 if keys else 0, causal=True)
    assert out.shape == (rows, 4, 64) and (out == 0).all()


def test_empty_kvcache():
    from flashattn import flash_attn_with_kvcache
    lens = np.array([1, 2], dtype=np.int32)
    # batch 0
    out = flash_attn_with_kvcache(_randn(0, 1, 4, 64), _randn(0, 10, 2, 64), _randn(0, 10, 2, 64),
                                  _randn(0, 1, 2, 64), _randn(0, 1, 2, 64), cache_seqlens=np.zeros(0, np.int32))
    assert out.shape == (0, 1, 4, 64)
    # no query rows: the new keys are still appended
    k_cache, v_cache, k_new = _randn(2, 10, 2, 64), _randn(2, 10, 2, 64), _randn(2, 1, 2, 64, seed=7)
    out = flash_attn_with_kvcache(_randn(2, 0, 4, 64), k_cache, v_cache, k_new, k_new,
                                  cache_seqlens=lens)
    assert out.shape == (2, 0, 4, 64) and np.array_equal(k_cache[1, 2], k_new[1, 0])
    # no keys: an empty cache, or no pages
    q = _randn(2, 1, 4, 64)
    for caches, table in (((_randn(2, 0, 2, 64), _randn(2, 0, 2, 64)), None),
                          ((_randn(3, 16, 2, 64), _randn(3, 16, 2, 64)), np.zeros((2, 0), np.int32))):
        out, lse = flash_attn_with_kvcache(q, *caches, block_table=table, return_softmax_lse=True)
        assert (out == 0).all() and (lse == -np.inf).all()
    # no new keys: the cache as it is
    expected = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, _randn(2, 0, 2, 64), _randn(2, 0, 2, 64), cache_seqlens=lens)
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("shape", [(3, 0, 5, 4, 64), (3, 2, 0, 4, 64), (3, 0, 4, 64)])
def test_empty_combine(shape):
    from flashattn import flash_attn_combine
    out, lse = flash_attn_combine(_randn(*shape), _randn(*shape[:-1]))
    assert out.shape == shape[1:] and lse.shape == shape[1:-1]
