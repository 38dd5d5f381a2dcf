"""Ring attention across the GPUs of one host against one GPU, with the model's prediction beside
each measurement (tools/gpu/ring_model.py fed with this run's own kernel times and link bandwidth).

Not yet run: written without a multi-GPU machine (see docs/PERF.md, "Context parallelism").

usage (on the GPU machine, after tools/gpu/distributed.sh installed the package):
  torchrun --nproc_per_node=8 tools/gpu/ring_bench.py [--seqlens 32768,131072,1048576] [--causal 1]
      [--layout zigzag] [--heads 32 --heads-k 8 --head-dim 128] [--single-max 262144] [--json FILE]

Per (seqlen, direction) it prints the ring's median time, tokens/s and TFLOP/s per GPU, the same for
one GPU running the whole sequence (measured up to --single-max tokens, beyond that extrapolated
from the longest measured one as seqlen², and marked so), the efficiency (per-GPU TFLOP/s over one
GPU's) and the model's predicted time and efficiency. Times: CUDA events around each call on every
rank, after a barrier, the slowest rank's; median of --iters after --warmup.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple

# NVLink multicast stays off on the shared machines (KINDS.md): set before NCCL starts.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ring_model  # noqa: E402

from flashattn import flash_attn_func  # noqa: E402
from flashattn.distributed import ring_flash_attn_func  # noqa: E402


DEVICE = "cuda"


def _seconds(fn: Callable[[], None]) -> float:
    if DEVICE == "cpu":  # --device cpu: a smoke test of this script on gloo, not a measurement
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


def timed(fn: Callable[[], None], warmup: int, iters: int, group_timing: bool = True) -> float:
    """Median seconds of fn over iters; with group_timing, each iteration's time is the slowest
    rank's (the ring finishes when its last rank does)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if group_timing:
            dist.barrier()
        t = torch.tensor(_seconds(fn), device=DEVICE)
        if group_timing:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(float(t))
    return statistics.median(times)


def tensors(batch: int, rows: int, heads: int, heads_k: int, d: int, grad: bool) -> List[torch.Tensor]:
    q = torch.randn(batch, rows, heads, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=grad)
    k = torch.randn(batch, rows, heads_k, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=grad)
    v = torch.randn(batch, rows, heads_k, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=grad)
    return [q, k, v, torch.randn_like(q)]


def fwd_and_fwdbwd(call: Callable[..., torch.Tensor], xs: List[torch.Tensor], warmup: int, iters: int,
                   group_timing: bool) -> Tuple[float, float]:
    q, k, v, dout = xs

    def fwd() -> None:
        with torch.no_grad():
            call(q, k, v)

    def fwdbwd() -> None:
        torch.autograd.grad(call(q, k, v), (q, k, v), dout)

    return timed(fwd, warmup, iters, group_timing), timed(fwdbwd, warmup, iters, group_timing)


def link_gbps(numel: int, warmup: int, iters: int) -> float:
    """Every rank sends numel bf16 to the next and receives from the previous, as one ring step."""
    rank, world = dist.get_rank(), dist.get_world_size()
    send = torch.randn(numel, device=DEVICE, dtype=torch.bfloat16)
    recv = torch.empty_like(send)

    def hop() -> None:
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return numel * 2 / timed(hop, warmup, iters) / 1e9


def kernel_times(shape: ring_model.Shape, world: int, warmup: int, iters: int) -> Dict[Tuple[int, int, bool], Tuple[float, float]]:
    """One GPU's (fwd, fwd+bwd) seconds of each block a ring step computes (ring_model.predict's
    calls), measured on this rank alone."""
    L = shape.seqlen // world
    blocks = {(L, L, shape.causal)}
    if world > 1:
        blocks.add((L, L // 2, False) if shape.causal else (L, L, False))
    out = {}
    for sq, sk, causal in blocks:
        q = torch.randn(shape.batch, sq, shape.heads, shape.head_dim, device=DEVICE, dtype=torch.bfloat16,
                        requires_grad=True)
        k, v = (torch.randn(shape.batch, sk, shape.heads_k, shape.head_dim, device=DEVICE, dtype=torch.bfloat16,
                            requires_grad=True) for _ in range(2))
        xs = [q, k, v, torch.randn_like(q)]
        out[(sq, sk, causal)] = fwd_and_fwdbwd(lambda a, b, c: flash_attn_func(a, b, c, causal=causal), xs, warmup,
                                               iters, group_timing=False)
    return out


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", default="32768,131072,1048576")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--layout", default="zigzag", choices=["zigzag", "contiguous"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-k", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--single-max", type=int, default=262144, help="longest sequence one GPU runs")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test on gloo")
    a = ap.parse_args()

    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    causal = bool(a.causal)
    rows: List[dict] = []
    single: Dict[int, Tuple[float, float]] = {}
    for seqlen in (int(s) for s in a.seqlens.split(",")):
        shape = ring_model.Shape(seqlen, a.heads, a.heads_k, a.head_dim, a.batch, causal)
        local = tensors(a.batch, seqlen // world, a.heads, a.heads_k, a.head_dim, grad=True)
        ring = fwd_and_fwdbwd(lambda q, k, v: ring_flash_attn_func(q, k, v, causal=causal, layout=a.layout,
                                                                   check_ranks=False),
                              local, a.warmup, a.iters, group_timing=True)
        del local
        gbps = link_gbps(2 * a.batch * (seqlen // world) * a.heads_k * a.head_dim, a.warmup, a.iters)
        blocks = kernel_times(shape, world, a.warmup, a.iters)
        extrapolated = seqlen > a.single_max
        if not extrapolated:
            full = tensors(a.batch, seqlen, a.heads, a.heads_k, a.head_dim, grad=True)
            single[seqlen] = fwd_and_fwdbwd(lambda q, k, v: flash_attn_func(q, k, v, causal=causal), full,
                                            a.warmup, a.iters, group_timing=False)
            del full
        longest = max(single)
        one = [t * (seqlen / longest) ** 2 for t in single[longest]] if extrapolated else single[seqlen]

        def measured_kernel(sq: int, sk: int, blk_causal: bool, direction: str) -> float:
            if (sq, sk) == (seqlen, seqlen):
                fwd, both = one
            else:
                fwd, both = blocks[(sq, sk, blk_causal)]
            return fwd if direction == "fwd" else both - fwd

        p = ring_model.predict(world, shape, kernel_time=measured_kernel, link_gbps=gbps)
        flops = ring_model.attention_flops(seqlen, seqlen, shape, causal)
        for direction, t_ring, t_one, t_model, model_eff in (
                ("fwd", ring[0], one[0], p.fwd_ms / 1e3, p.fwd_efficiency),
                ("fwd+bwd", ring[1], one[1], (p.fwd_ms + p.bwd_ms) / 1e3,
                 (p.one_gpu_fwd_ms + p.one_gpu_bwd_ms) / (world * (p.fwd_ms + p.bwd_ms)))):
            work = flops * (1.0 if direction == "fwd" else 3.5)
            rows.append(dict(
                seqlen=seqlen, world=world, causal=causal, layout=a.layout, direction=direction,
                heads=a.heads, heads_k=a.heads_k, head_dim=a.head_dim, batch=a.batch,
                ring_ms=t_ring * 1e3, ring_tokens_per_s_per_gpu=a.batch * seqlen / t_ring / world,
                ring_tflops_per_gpu=work / t_ring / world / 1e12,
                one_gpu_ms=t_one * 1e3, one_gpu_extrapolated=extrapolated,
                one_gpu_tokens_per_s=a.batch * seqlen / t_one, one_gpu_tflops=work / t_one / 1e12,
                efficiency=t_one / (world * t_ring), link_gbps=gbps,
                model_ms=t_model * 1e3, model_efficiency=model_eff))
    if rank == 0:
        print("| seqlen | dir | GPUs | ring ms | tok/s/GPU | TFLOP/s/GPU | 1 GPU TFLOP/s | eff. | model ms | "
              "model eff. | link GB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            mark = "*" if r["one_gpu_extrapolated"] else ""
            print(f"| {_tokens(r['seqlen'])} | {r['direction']} | {r['world']} | {r['ring_ms']:.2f} | "
                  f"{r['ring_tokens_per_s_per_gpu']:.0f} | {r['ring_tflops_per_gpu']:.0f} | "
                  f"{r['one_gpu_tflops']:.0f}{mark} | {r['efficiency']:.2f} | {r['model_ms']:.2f} | "
                  f"{r['model_efficiency']:.2f} | {r['link_gbps']:.0f} |")
        print("(* one GPU extrapolated as seqlen^2 from the longest sequence it ran)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
