"""What each process of tests/python/test_distributed.py runs: the context-parallel cases, each
compared with attention over the whole sequence in one process, and the error cases.

Every rank makes the same full inputs (same seed), takes its shard, runs ring or Ulysses
attention and its backward, and compares its shard of out, LSE, dq, dk, dv with the same shard of
the reference, by the project's rule |ours - exact| <= 2 x |same precision - exact| + floor:
exact is flashattn.reference in float64 on the host (autograd through it gives the gradients),
same precision the same naive reference run in the inputs' dtype.
"""
from __future__ import annotations

import datetime
import json
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

import flashattn
from flashattn import distributed as cp
from flashattn import reference
from helpers import assert_within_rule, rounding_floor


@dataclass(frozen=True)
class Case:
    """One comparison: `kind` ring or ulysses; lengths are chunk lengths (a sequence is
    world_size x chunks-per-rank chunks long): one per batch element (dense) or per sequence
    (varlen)."""

    name: str
    kind: str = "ring"
    layout: str = "contiguous"
    varlen: bool = False
    causal: bool = False
    window: Tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    heads: Tuple[int, int] = (4, 2)
    head_dim: int = 32
    chunk_lens: Tuple[int, ...] = (5, 5)
    dtype: str = "float32"
    options: Dict[str, Any] = field(default_factory=dict)


RING_CASES = [
    Case("ring_contiguous_full_mha", heads=(4, 4)),
    Case("ring_contiguous_causal_gqa", causal=True),
    Case("ring_zigzag_causal_gqa", layout="zigzag", causal=True),
    Case("ring_zigzag_full", layout="zigzag", heads=(2, 1)),
    Case("ring_contiguous_window_inside_chunk", window=(3, 2), chunk_lens=(6, 6)),
    Case("ring_contiguous_window_wider_than_chunk", window=(8, 1), chunk_lens=(5, 5)),
    Case("ring_contiguous_causal_window_stops_early", causal=True, window=(4, -1), chunk_lens=(6, 6)),
    Case("ring_contiguous_diagonal_window_one_step", window=(0, 0), chunk_lens=(3, 3)),
    Case("ring_zigzag_causal_window", layout="zigzag", causal=True, window=(5, -1), chunk_lens=(4, 4)),
    Case("ring_zigzag_window_two_sided", layout="zigzag", window=(2, 7), chunk_lens=(3, 3)),
    Case("ring_zigzag_causal_head_dim_20", layout="zigzag", causal=True, head_dim=20),
    Case("ring_contiguous_causal_softcap", causal=True, softcap=2.5),
    Case("ring_zigzag_causal_gqa_bf16", layout="zigzag", causal=True, dtype="bfloat16"),
    Case("ring_varlen_contiguous_causal", varlen=True, causal=True, chunk_lens=(3, 1, 6, 2)),
    Case("ring_varlen_zigzag_causal_gqa", varlen=True, layout="zigzag", causal=True, chunk_lens=(2, 5, 1)),
    Case("ring_varlen_zigzag_window", varlen=True, layout="zigzag", window=(3, 2), chunk_lens=(1, 4, 2)),
    Case("ring_varlen_contiguous_full", varlen=True, heads=(4, 4), chunk_lens=(4, 1, 3)),
    Case("ring_varlen_contiguous_causal_window", varlen=True, causal=True, window=(2, -1), chunk_lens=(3, 5)),
]

ULYSSES_CASES = [
    Case("ulysses_contiguous_causal", kind="ulysses", causal=True, heads=(8, 4)),
    Case("ulysses_zigzag_causal_gqa", kind="ulysses", layout="zigzag", causal=True, heads=(8, 4)),
    Case("ulysses_contiguous_window", kind="ulysses", window=(3, 2), heads=(4, 4), chunk_lens=(6, 6)),
    Case("ulysses_zigzag_full_bf16", kind="ulysses", layout="zigzag", heads=(4, 4), dtype="bfloat16"),
    Case("ulysses_varlen_contiguous_causal", kind="ulysses", varlen=True, causal=True, heads=(8, 4),
         chunk_lens=(3, 1, 6)),
    Case("ulysses_varlen_zigzag_full_gqa", kind="ulysses", varlen=True, layout="zigzag", heads=(8, 4),
         chunk_lens=(2, 3)),
]

CASES = RING_CASES + ULYSSES_CASES

ERROR_CASES = ["ring_dropout", "ulysses_dropout", "ulysses_heads_q", "ulysses_heads_k", "zigzag_odd_seqlen",
               "shapes_differ_across_ranks", "causal_differs_across_ranks", "shard_indivisible", "varlen_zigzag_odd_length",
               "library_rejects_mixed_dtypes", "varlen_library_rejects_mixed_dtypes", "ring_after_the_errors"]


ROUND_TRIPS = ["unshard_contiguous", "unshard_zigzag", "unshard_varlen_contiguous", "unshard_varlen_zigzag"]


def _dtype(case: Case, device: str) -> torch.dtype:
    # The GPU kernels take fp16/bf16: float32 cases run in bfloat16 there.
    name = case.dtype if device == "cpu" else "bfloat16"
    return getattr(torch, name)


def _floor(dtype: torch.dtype, q, k, v, scale: float, exact: torch.Tensor) -> float:
    if dtype == torch.bfloat16:
        return 2.0 ** -8 * max(1.0, float(exact.abs().max()) if exact.numel() else 1.0)
    to_np = lambda t: t.detach().double().cpu().numpy()  # noqa: E731
    return rounding_floor(np.float32, to_np(q), to_np(k), to_np(v), scale, to_np(exact))


def _reference(case: Case, q, k, v, cu: Optional[List[int]], scale: float):
    options = dict(softmax_scale=scale, causal=case.causal, window_size=case.window, softcap=case.softcap)
    if cu is None:
        out, lse, _ = reference.attention_reference(q, k, v, **options)
        return out, lse
    return reference.varlen_attention_reference(q, k, v, cu, cu, **options)


def run_case(case: Case, device: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = _dtype(case, device)
    per_rank = 2 if case.layout == "zigzag" else 1
    lengths = [c * world * per_rank for c in case.chunk_lens]
    heads_q, heads_k = case.heads
    gen = torch.Generator().manual_seed(sum(map(ord, case.name)))
    if case.varlen:
        cu = [0] + np.cumsum(lengths).tolist()
        shape_q, shape_k = (cu[-1], heads_q, case.head_dim), (cu[-1], heads_k, case.head_dim)
    else:
        cu = None
        shape_q = (len(lengths), lengths[0], heads_q, case.head_dim)
        shape_k = (len(lengths), lengths[0], heads_k, case.head_dim)
    full = [torch.randn(s, generator=gen).to(dtype) for s in (shape_q, shape_k, shape_k, shape_q)]
    q, k, v, dout = full
    scale = case.head_dim ** -0.5

    def to_local(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        if cu is None:
            return cp.shard(x, dim, layout=case.layout)
        moved = x.movedim(dim, 0)
        return cp.shard_varlen(moved, torch.tensor(cu, dtype=torch.int32), layout=case.layout)[0].movedim(0, dim)

    local = [to_local(x, 0 if case.varlen else 1).to(device) for x in full]
    ql, kl, vl = (x.detach().requires_grad_() for x in local[:3])
    fn = {("ring", False): cp.ring_flash_attn_func, ("ring", True): cp.ring_flash_attn_varlen_func,
          ("ulysses", False): cp.ulysses_attn_func, ("ulysses", True): cp.ulysses_attn_varlen_func}[
        (case.kind, case.varlen)]
    args = [ql, kl, vl]
    if case.varlen:
        cu_local = cp.shard_varlen(q, torch.tensor(cu, dtype=torch.int32), layout=case.layout)[1].to(device)
        args += [cu_local, int((cu_local[1:] - cu_local[:-1]).max())]
    out, lse = fn(*args, causal=case.causal, window_size=case.window, softcap=case.softcap, layout=case.layout,
                  return_lse=True, **case.options)
    grads = torch.autograd.grad(out, (ql, kl, vl), local[3])

    exact_in = [x.double().requires_grad_() for x in (q, k, v)]
    low_in = [x.clone().requires_grad_() for x in (q, k, v)]
    out_hi, lse_hi = _reference(case, *exact_in, cu, scale)
    out_lo, lse_lo = _reference(case, *low_in, cu, scale)
    grads_hi = torch.autograd.grad(out_hi, exact_in, dout.double())
    grads_lo = torch.autograd.grad(out_lo, low_in, dout)
    lse_dim = 1 if case.varlen else 2  # lse (heads, total) or (batch, heads, seqlen)
    what = f"{case.name} rank {rank}/{world} {device}"
    floor = _floor(dtype, q, k, v, scale, out_hi)
    assert out.dtype == dtype and out.shape == ql.shape[:-1] + (vl.shape[-1],), what
    assert_within_rule(out.cpu(), to_local(out_hi, 0 if case.varlen else 1),
                       to_local(out_lo, 0 if case.varlen else 1), floor, f"{what} out")
    assert_within_rule(lse.cpu(), to_local(lse_hi.float(), lse_dim), to_local(lse_lo.float(), lse_dim), floor,
                       f"{what} lse")
    for name, g, g_hi, g_lo in zip(("dq", "dk", "dv"), grads, grads_hi, grads_lo):
        assert g.dtype == dtype and g.shape == local["qkv".index(name[1])].shape, f"{what} {name}"
        grad_floor = _floor(dtype, q, k, v, scale, g_hi) * 4
        assert_within_rule(g.cpu(), to_local(g_hi, 0 if case.varlen else 1), to_local(g_lo, 0 if case.varlen else 1),
                           grad_floor, f"{what} {name}")


def _expect(error: type, argument: str, fn: Callable, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except error as e:
        assert f"argument '{argument}'" in str(e), f"message does not name '{argument}': {e}"
        return
    raise AssertionError(f"no {error.__name__} naming '{argument}'")


def run_error_case(name: str, device: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.randn(1, 4 * world, world, 8).to(device, torch.bfloat16 if device == "cuda" else torch.float32)
    if name == "ring_dropout":
        _expect(flashattn.UnsupportedError, "dropout_p", cp.ring_flash_attn_func, x, x, x, dropout_p=0.1)
    elif name == "ulysses_dropout":
        _expect(flashattn.UnsupportedError, "dropout_p", cp.ulysses_attn_func, x, x, x, dropout_p=0.1)
    elif name == "ulysses_heads_q":
        q = x[:, :, :1].expand(1, 4 * world, world + 1, 8).contiguous()
        _expect(ValueError, "q", cp.ulysses_attn_func, q, q[:, :, :1], q[:, :, :1])
    elif name == "ulysses_heads_k":
        _expect(ValueError, "k", cp.ulysses_attn_func, x, x[:, :, :1], x[:, :, :1])
    elif name == "zigzag_odd_seqlen":
        _expect(ValueError, "q", cp.ring_flash_attn_func, x[:, :3], x[:, :3], x[:, :3], layout="zigzag")
    elif name == "shapes_differ_across_ranks":
        # Without the agreement check the ring would wait for messages of another size: a hang.
        mine = x[:, :2 + 2 * (rank == 0)]
        _expect(ValueError, "q", cp.ring_flash_attn_func, mine, mine, mine, causal=True)
    elif name == "causal_differs_across_ranks":
        # Ulysses would not hang, but its heads would be computed under different masks.
        _expect(ValueError, "causal", cp.ring_flash_attn_func, x, x, x, causal=rank == 0)
        _expect(ValueError, "causal", cp.ulysses_attn_func, x, x, x, causal=rank == 0)
    elif name == "shard_indivisible":
        _expect(ValueError, "x", cp.zigzag_shard, x[:, :2 * world + 1], 1)
    elif name == "varlen_zigzag_odd_length":
        rows = x[0, :4]
        cu = torch.tensor([0, 1, 4], dtype=torch.int32, device=device)
        _expect(ValueError, "cu_seqlens", cp.ring_flash_attn_varlen_func, rows, rows, rows, cu, 3, layout="zigzag")
    elif name == "library_rejects_mixed_dtypes":
        # Raised by the library's own check on every rank before any transfer: the cases after
        # this one in the same group would see stray messages otherwise.
        _expect(flashattn.DTypeError, "k", cp.ring_flash_attn_func, x, x.half(), x.half(), causal=True)
    elif name == "varlen_library_rejects_mixed_dtypes":
        rows = x[0]
        cu = torch.tensor([0, rows.shape[0]], dtype=torch.int32, device=device)
        _expect(flashattn.DTypeError, "k", cp.ring_flash_attn_varlen_func, rows, rows.half(), rows.half(), cu,
                rows.shape[0])
    elif name == "ring_after_the_errors":
        # A failed call that left a transfer in flight would feed this ring a stray message.
        run_case(RING_CASES[2], device)
    else:
        raise AssertionError(f"unknown error case {name}")


def run_round_trip(name: str, device: str) -> None:
    """unshard(shard(x)) == x on every rank, exactly, and the shards are disjoint pieces of x."""
    world = dist.get_world_size()
    layout = name.rsplit("_", 1)[1]
    per_rank = 2 if layout == "zigzag" else 1
    if "varlen" in name:
        lengths = [c * world * per_rank for c in (3, 1, 2)]
        x = torch.arange(sum(lengths) * 3, dtype=torch.float32).reshape(-1, 3)
        cu = torch.tensor([0] + np.cumsum(lengths).tolist(), dtype=torch.int32)
        local, cu_local = cp.shard_varlen(x, cu, layout=layout)
        assert cu_local.tolist() == [0] + np.cumsum([n // world for n in lengths]).tolist()
        back = cp.unshard_varlen(local.to(device), cu_local.to(device), layout=layout)
    else:
        x = torch.arange(2 * 4 * world * per_rank * 3, dtype=torch.float32).reshape(2, -1, 3)
        local = cp.shard(x, 1, layout=layout)
        assert local.shape[1] == x.shape[1] // world
        back = cp.unshard(local.to(device), 1, layout=layout)
    gathered = cp.unshard(local.to(device), 0, layout="contiguous") if "varlen" in name else \
        cp.unshard(local.to(device), 1, layout="contiguous")
    assert sorted(gathered.flatten().tolist()) == sorted(x.flatten().tolist()), f"{name}: shards overlap"
    assert torch.equal(back.cpu(), x), f"{name}: unshard(shard(x)) != x"


def worker(rank: int, world_size: int, backend: str, device: str, init_file: str, result_dir: str,
           names: List[str]) -> None:
    """One rank: runs every named case and writes {name: "ok" or the failure} to rank<r>.json."""
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.set_num_threads(1)
    flashattn.set_cpu_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=90))
    by_name = {c.name: c for c in CASES}
    results = {}
    for name in names:
        try:
            if name in by_name:
                run_case(by_name[name], device)
            elif name in ROUND_TRIPS:
                run_round_trip(name, device)
            else:
                run_error_case(name, device)
            results[name] = "ok"
        except Exception:  # reported by the test of this case, in the parent process
            results[name] = traceback.format_exc(limit=6)
        with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
