"""Which library calls one ring step makes: pure integer arithmetic, no torch (tested without it).

A sequence of length L is cut into equal chunks; rank r holds some of them, concatenated in
ascending global order (its *local* sequence):

* ``contiguous``: L = N chunks, rank r holds chunk r;
* ``zigzag``: L = 2N chunks, rank r holds chunks r and 2N-1-r, so that under a causal mask every
  rank does the same work.

At a ring step the queries of one rank meet the keys of another (or its own). The global mask is
the library's, for a square problem: query i sees key j iff ``i - left <= j <= i + right`` (causal
means right = 0; -1 means unbounded). For one (query chunk, key chunk) pair with global starts
qs, ks, local query row a and key b see each other iff ``lo <= b - a <= hi`` with
``lo = qs - ks - left`` and ``hi = qs - ks + right``.

The library takes a window aligned to the bottom-right corner of its own block:
``b - a <= (lk - lq) + right'`` and ``b - a >= (lk - lq) - left'`` with right', left' >= 0 or -1.
Trimming a block to the rows that see some key and the keys some row sees, with exclusive ends
(a1, b1), gives ``right' = hi - (b1 - a1)`` and ``left' = (b1 - a1) - lo``, and both are >= 0 for
every band (see ``_trimmed``): every pair is expressible, no limitation to document.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

LAYOUTS = ("contiguous", "zigzag")
UNBOUNDED = -1


@dataclass(frozen=True)
class Block:
    """One library call: local query rows [q_start, q_stop) against key rows [k_start, k_stop) of
    the key/value block at hand, with the library's window (left, right), -1 = unbounded,
    bottom-right aligned to this block's own lengths."""

    q_start: int
    q_stop: int
    k_start: int
    k_stop: int
    window: Tuple[int, int]

    @property
    def is_full(self) -> bool:
        return self.window == (UNBOUNDED, UNBOUNDED)


def chunks_per_rank(layout: str) -> int:
    return 2 if layout == "zigzag" else 1


def chunk_ids(layout: str, rank: int, world_size: int) -> List[int]:
    """The global chunk numbers rank holds, in local order (ascending)."""
    if layout == "zigzag":
        return [rank, 2 * world_size - 1 - rank]
    return [rank]


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"argument 'layout': must be one of {LAYOUTS}, got {layout!r}")


def global_window(causal: bool, window_size: Tuple[int, int]) -> Tuple[Optional[int], Optional[int]]:
    """(left, right) of the global mask with None for unbounded; causal sets right to 0 (as the
    library does)."""
    left, right = window_size
    if causal:
        right = 0
    return (None if left < 0 else left), (None if right < 0 else right)


def _trimmed(lq: int, lk: int, lo: Optional[int], hi: Optional[int]) -> Optional[Tuple[int, int, int, int, Tuple[int, int]]]:
    """The block of a band lo <= b - a <= hi (None = unbounded) over lq x lk, trimmed to rows that
    see a key and keys that a row sees: (a0, a1, b0, b1, (left', right')), or None if empty.

    Why left', right' >= 0: with a1 = min(lq, lk - lo) and b1 = min(lk, lq + hi),
    b1 - a1 is lk - lq (then lo <= lk - lq <= hi, as neither end was clipped), hi (b1 clipped) or
    lo (a1 clipped); both clipped would need hi < lk - lq < lo, impossible for lo <= hi."""
    a0 = 0 if hi is None else max(0, -hi)
    a1 = lq if lo is None else min(lq, lk - lo)
    b0 = 0 if lo is None else max(0, lo)
    b1 = lk if hi is None else min(lk, lq + hi)
    if a0 >= a1 or b0 >= b1:
        return None
    corner = b1 - a1  # b - a at the block's bottom-right corner
    right = UNBOUNDED if hi is None else hi - corner
    left = UNBOUNDED if lo is None else corner - lo
    assert right >= UNBOUNDED and left >= UNBOUNDED and (right != UNBOUNDED or hi is None) \
        and (left != UNBOUNDED or lo is None), "ring plan: window not expressible (a bug)"
    rows, keys = a1 - a0, b1 - b0
    # A bound no pair reaches is dropped: full blocks then coalesce and take the unmasked kernels.
    if right != UNBOUNDED and right >= rows - 1:
        right = UNBOUNDED
    if left != UNBOUNDED and left >= keys - 1:
        left = UNBOUNDED
    return a0, a1, b0, b1, (left, right)


def _coalesce(blocks: List[Block]) -> List[Block]:
    """Merges full blocks that share one side and abut on the other (fewer, larger calls)."""
    merged = True
    while merged:
        merged = False
        for i in range(len(blocks)):
            for j in range(len(blocks)):
                x, y = blocks[i], blocks[j]
                if i == j or not (x.is_full and y.is_full):
                    continue
                joined = None
                if (x.k_start, x.k_stop) == (y.k_start, y.k_stop) and x.q_stop == y.q_start:
                    joined = Block(x.q_start, y.q_stop, x.k_start, x.k_stop, x.window)
                elif (x.q_start, x.q_stop) == (y.q_start, y.q_stop) and x.k_stop == y.k_start:
                    joined = Block(x.q_start, x.q_stop, x.k_start, y.k_stop, x.window)
                if joined is not None:
                    blocks = [b for n, b in enumerate(blocks) if n not in (i, j)] + [joined]
                    merged = True
                    break
            if merged:
                break
    return sorted(blocks, key=lambda b: (b.q_start, b.k_start))


def plan_step(layout: str, world_size: int, q_rank: int, kv_rank: int, chunk_len: int, causal: bool,
              window_size: Tuple[int, int]) -> List[Block]:
    """The calls that compute rank q_rank's queries against rank kv_rank's keys, every chunk
    chunk_len long. Each (query, key) pair the global mask shows is covered exactly once."""
    left, right = global_window(causal, window_size)
    ids = chunk_ids(layout, q_rank, world_size)
    local_len = chunk_len * len(ids)
    if q_rank == kv_rank and left is None and right == 0:
        # Own keys under a plain causal mask: local order is global order on both sides, so the
        # local causal mask is the global one, whatever gaps lie between the rank's chunks.
        return [Block(0, local_len, 0, local_len, (UNBOUNDED, 0))] if local_len else []
    blocks = []
    for qi, q_chunk in enumerate(ids):
        for ki, k_chunk in enumerate(chunk_ids(layout, kv_rank, world_size)):
            offset = (q_chunk - k_chunk) * chunk_len  # qs - ks
            lo = None if left is None else offset - left
            hi = None if right is None else offset + right
            t = _trimmed(chunk_len, chunk_len, lo, hi)
            if t is None:
                continue
            a0, a1, b0, b1, window = t
            blocks.append(Block(qi * chunk_len + a0, qi * chunk_len + a1, ki * chunk_len + b0,
                                ki * chunk_len + b1, window))
    return _coalesce(blocks)


def ring_plans(layout: str, world_size: int, rank: int, chunk_len: int, causal: bool,
               window_size: Tuple[int, int]) -> List[List[Block]]:
    """plans[step]: the calls of ring step `step`, where rank holds the keys of rank - step."""
    return [plan_step(layout, world_size, rank, (rank - step) % world_size, chunk_len, causal, window_size)
            for step in range(world_size)]


# ---------------------------------------------------------------------------------------------
# Packed sequences (varlen): every sequence has its own chunk length
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarlenCall:
    """One varlen library call: entry e takes query rows q_ranges[e] and key rows k_ranges[e] of
    the packed local tensors (one range per entry, no query row twice), all with one window."""

    q_ranges: Tuple[Tuple[int, int], ...]
    k_ranges: Tuple[Tuple[int, int], ...]
    window: Tuple[int, int]


def varlen_step_calls(layout: str, world_size: int, q_rank: int, kv_rank: int, cu_seqlens: Sequence[int],
                      causal: bool, window_size: Tuple[int, int]) -> List[VarlenCall]:
    """Groups the blocks of every sequence by window; blocks of one sequence that share a window
    go to different calls, so that a call never has one query row twice (the forward merges a
    call's partial output into the running one row by row)."""
    per_rank = chunks_per_rank(layout)
    cache: Dict[int, List[Block]] = {}
    groups: Dict[Tuple[Tuple[int, int], int], Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]] = {}
    for start, stop in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        chunk_len = (stop - start) // per_rank
        if chunk_len not in cache:
            cache[chunk_len] = plan_step(layout, world_size, q_rank, kv_rank, chunk_len, causal, window_size)
        seen: Dict[Tuple[int, int], int] = {}
        for block in cache[chunk_len]:
            ordinal = seen.get(block.window, 0)
            seen[block.window] = ordinal + 1
            qs, ks = groups.setdefault((block.window, ordinal), ([], []))
            qs.append((start + block.q_start, start + block.q_stop))
            ks.append((start + block.k_start, start + block.k_stop))
    return [VarlenCall(tuple(qs), tuple(ks), key[0]) for key, (qs, ks) in groups.items()]
