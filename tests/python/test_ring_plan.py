"""The ring attention plan (flashattn.distributed._plan, no torch needed): for every layout, world
size, chunk length, causal flag and window, the blocks of all ring steps, each masked with the
library's bottom-right convention (reference.visible_mask), cover exactly the pairs the global
mask shows, each once."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from flashattn import reference
from flashattn.distributed import _plan

WINDOWS = [(-1, -1), (0, 0), (2, 1), (1, 3), (4, -1), (-1, 2), (7, 0), (0, 5), (11, 11), (3, 20)]


def _global_positions(layout, rank, world_size, chunk_len):
    return np.concatenate([np.arange(c * chunk_len, (c + 1) * chunk_len)
                           for c in _plan.chunk_ids(layout, rank, world_size)])


def _library_mask(rows, keys, window):
    mask = reference.visible_mask(reference._Ops(np.zeros(1)), rows, keys, False, window, None)
    return np.broadcast_to(mask, (rows, keys))


@pytest.mark.parametrize("layout", _plan.LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_blocks_cover_the_global_mask_once(layout, world_size, causal):
    for chunk_len, window in itertools.product([1, 2, 3, 5], WINDOWS):
        total = chunk_len * world_size * _plan.chunks_per_rank(layout)
        expected = _library_mask(total, total, (window[0], 0) if causal else window)
        for rank in range(world_size):
            q_pos = _global_positions(layout, rank, world_size, chunk_len)
            covered = np.zeros((total, total), dtype=int)
            for step, blocks in enumerate(_plan.ring_plans(layout, world_size, rank, chunk_len, causal, window)):
                k_pos = _global_positions(layout, (rank - step) % world_size, world_size, chunk_len)
                for b in blocks:
                    assert 0 <= b.q_start < b.q_stop <= len(q_pos) and 0 <= b.k_start < b.k_stop <= len(k_pos)
                    left, right = b.window
                    assert left >= -1 and right >= -1
                    seen = _library_mask(b.q_stop - b.q_start, b.k_stop - b.k_start, b.window)
                    rows, keys = np.nonzero(seen)
                    np.add.at(covered, (q_pos[b.q_start + rows], k_pos[b.k_start + keys]), 1)
            what = f"{layout} N={world_size} rank={rank} chunk={chunk_len} causal={causal} window={window}"
            assert covered.max(initial=0) <= 1, f"{what}: a pair computed twice"
            np.testing.assert_array_equal(covered[q_pos] == 1, expected[q_pos], err_msg=what)


def test_zigzag_causal_balances_work():
    world_size, chunk_len = 4, 8
    for rank in range(world_size):
        plans = _plan.ring_plans("zigzag", world_size, rank, chunk_len, True, (-1, -1))
        assert len(plans[0]) == 1 and plans[0][0].window == (-1, 0)  # own keys: one causal call
        for blocks in plans[1:]:  # other ranks' keys: one unmasked call of half the block
            assert len(blocks) == 1 and blocks[0].is_full
            b = blocks[0]
            assert (b.q_stop - b.q_start) * (b.k_stop - b.k_start) == 2 * chunk_len * chunk_len


def test_bad_layout_names_the_argument():
    with pytest.raises(ValueError, match="argument 'layout'"):
        _plan.check_layout("striped")


@pytest.mark.parametrize("layout", _plan.LAYOUTS)
@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (False, (3, 1)), (True, (2, -1))])
def test_varlen_calls_are_the_per_sequence_blocks(layout, causal, window):
    world_size, per_rank = 3, _plan.chunks_per_rank(layout)
    chunk_lens = [2, 0, 5, 1, 2]
    cu = np.concatenate([[0], np.cumsum([c * per_rank for c in chunk_lens])]).tolist()
    for rank, kv_rank in itertools.product(range(world_size), repeat=2):
        calls = _plan.varlen_step_calls(layout, world_size, rank, kv_rank, cu, causal, window)
        got = set()
        for call in calls:
            assert len(call.q_ranges) == len(call.k_ranges)
            rows = [r for start, stop in call.q_ranges for r in range(start, stop)]
            assert len(rows) == len(set(rows)), "a query row twice in one call"
            got |= {(q, k, call.window) for q, k in zip(call.q_ranges, call.k_ranges)}
        want = set()
        for start, c in zip(cu[:-1], chunk_lens):
            for b in _plan.plan_step(layout, world_size, rank, kv_rank, c, causal, window):
                want.add(((start + b.q_start, start + b.q_stop), (start + b.k_start, start + b.k_stop), b.window))
        assert got == want
