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
