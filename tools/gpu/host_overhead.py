"""Host time of one attention call, as a training step pays it when the GPU has caught up (after a
device synchronisation): flashattn's flash_attn_func (through flashattn.compat, as Transformers
calls it) beside torch's scaled_dot_product_attention, forward alone and forward + backward.

The GPU is kept busy (torch.cuda._sleep) while the calls are made, so each call's host time is its
Python, dispatch and launch work, not a wait on the device. Prints one JSON line per (impl, shape,
mode): median microseconds of host time per call over --calls calls.

usage (on the GPU machine, after `python3 -m pip install --no-build-isolation .`):
  python3 tools/gpu/host_overhead.py [--shapes 1x16384,4x4096] [--calls 50] [--json FILE]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import flashattn.compat

flashattn.compat.install()
from flash_attn import flash_attn_func  # noqa: E402  (flashattn's, through the shim)

HEADS_Q, HEADS_K, HEAD_DIM = 16, 4, 128  # tools/gpu/llama_step.py's model


def ours(q, k, v):
    return flash_attn_func(q, k, v, causal=True)


def sdpa(q, k, v):
    # SDPA takes (batch, heads, seqlen, d); the transposes are views, as in Transformers' sdpa path.
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                         enable_gqa=True)
    return out.transpose(1, 2)


def make_qkv(batch, seqlen, requires_grad):
    """q, k, v of the step's attention: (batch, seqlen, heads, d), bf16, on the GPU."""
    return [torch.randn(batch, seqlen, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16,
                        requires_grad=requires_grad) for heads in (HEADS_Q, HEADS_K, HEADS_K)]


def median_host_us(work, calls, gpu_ahead_cycles):
    """Median host microseconds of work() over `calls` calls, each with gpu_ahead_cycles of GPU
    work (torch.cuda._sleep) queued ahead of it, so that it never waits on the device."""
    times = []
    for _ in range(calls):
        torch.cuda._sleep(gpu_ahead_cycles)
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def host_us(fn, q, k, v, backward, calls):
    """Median host microseconds of fn (and its backward) with the GPU busy throughout."""
    grad = torch.randn(q.shape[:-1] + (v.shape[-1],), device=q.device, dtype=q.dtype) if backward else None

    def work():
        out = fn(q, k, v)
        if backward:
            out.backward(grad)

    for _ in range(3):  # warm-up: first-call set-up (kernel attributes, tensor maps, allocator)
        work()
    torch.cuda.synchronize()
    return median_host_us(work, calls, 20_000_000)  # ~10 ms of GPU work ahead of each call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x16384,4x4096")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for shape in a.shapes.split(","):
        batch, seqlen = map(int, shape.split("x"))
        for backward in (False, True):
            q, k, v = make_qkv(batch, seqlen, backward)
            for name, fn in (("flashattn", ours), ("sdpa", sdpa)):
                with torch.set_grad_enabled(backward):
                    us = host_us(fn, q, k, v, backward, a.calls)
                row = {"impl": name, "batch": batch, "seqlen": seqlen, "mode": "fwd+bwd" if backward else "fwd",
                       "host_us": round(us, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
