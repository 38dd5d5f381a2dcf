"""A model of ring attention's time on N GPUs (flashattn.distributed.ring_flash_attn_func), from
the single-GPU kernel time and the link bandwidth: how well the K/V transfers hide behind the
attention of the block at hand. docs/PERF.md ("Context parallelism: a model") derives it and gives
the worked prediction this prints.

Per rank the sequence is L = S/N tokens. Forward step s (N steps): attend to the block held
(compute C_s, then merge it into the float32 running output, G), while the next block
(K and V, 4·b·L·h_k·d bytes in bf16) travels one hop (M = bytes/BW + latency):

    T_fwd = sum_{s<N-1} max(C_s + G, M) + C_{N-1} + G

Backward step s: the block's dQ/dK/dV (C'_s), float32 accumulation (G'), while the next K/V
(4·b·L·h_k·d bytes) and the previous step's dK/dV (float32, 8·b·L·h_k·d bytes) share the link;
the last dK/dV hop home is exposed:

    T_bwd = sum_{s<N-1} max(C'_s + G', M_kv + [s>0] M_dkv) + C'_{N-1} + G' + M_dkv

Efficiency = T_one_gpu(S) / (N · T_ring): the per-GPU throughput against one GPU running the whole
sequence (1.0 = perfect scaling). C_s: plain layout, no mask: L×L blocks; zigzag with a causal
mask: step 0 an L×L causal block, every other step an L×L/2 unmasked one (the same work on every
rank).

usage: python3 tools/gpu/ring_model.py [--link-gbps 400] [--fwd-tflops 650] [--bwd-tflops 580]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Hardware:
    fwd_tflops: float = 650.0  # FA3 forward, d128, long sequences (docs/PERF.md)
    bwd_tflops: float = 580.0  # FA3 backward, d128 (docs/PERF.md)
    link_gbps: float = 400.0  # per direction between ring neighbours: an assumption (NVLink)
    latency_us: float = 20.0  # per hop: an assumption
    hbm_tbps: float = 3.5  # what torch's elementwise ops reach: an assumption (4.8 peak)
    merge_bytes: float = 18.0  # per output element per step: mul_ + addcmul_ (_merge.py)
    kv_grad_bytes: float = 26.0  # per K/V element per step: zeroed fp32 dK/dV, += block, += arrived
    q_grad_bytes: float = 10.0  # per Q element per step: fp32 dQ += block (_blocks.py, ring.py)


@dataclass(frozen=True)
class Shape:
    seqlen: int
    heads: int = 32
    heads_k: int = 8
    head_dim: int = 128
    batch: int = 1
    causal: bool = True


def attention_flops(sq: int, sk: int, shape: Shape, causal: bool) -> float:
    """Forward FLOPs (the project's convention: 4·b·h·sq·sk·d, halved under a causal mask)."""
    flops = 4.0 * shape.batch * shape.heads * sq * sk * shape.head_dim
    return flops / 2 if causal else flops


KernelTime = Callable[[int, int, bool, str], float]  # (sq, sk, causal, "fwd"|"bwd") -> seconds


def flops_kernel_time(hw: Hardware, shape: Shape) -> KernelTime:
    """Kernel time at a constant rate (what the worked prediction assumes); ring_bench.py passes
    measured times instead."""
    def time(sq: int, sk: int, causal: bool, direction: str) -> float:
        flops = attention_flops(sq, sk, shape, causal)
        return flops / (hw.fwd_tflops * 1e12) if direction == "fwd" else 2.5 * flops / (hw.bwd_tflops * 1e12)
    return time


@dataclass(frozen=True)
class Prediction:
    world: int
    seqlen: int
    fwd_ms: float
    bwd_ms: float
    one_gpu_fwd_ms: float
    one_gpu_bwd_ms: float
    comm_over_compute: float  # forward, one step: M / C (< 1: the transfer hides)

    @property
    def fwd_efficiency(self) -> float:
        return self.one_gpu_fwd_ms / (self.world * self.fwd_ms)

    @property
    def bwd_efficiency(self) -> float:
        return self.one_gpu_bwd_ms / (self.world * self.bwd_ms)


def predict(world: int, shape: Shape, hw: Hardware = Hardware(), kernel_time: Optional[KernelTime] = None,
            link_gbps: Optional[float] = None) -> Prediction:
    kernel = kernel_time or flops_kernel_time(hw, shape)
    bw = (link_gbps or hw.link_gbps) * 1e9
    n, L = world, shape.seqlen // world
    kv_elems = 2 * shape.batch * L * shape.heads_k * shape.head_dim
    m_kv = kv_elems * 2 / bw + hw.latency_us * 1e-6
    m_dkv = kv_elems * 4 / bw + hw.latency_us * 1e-6
    out_elems = shape.batch * L * shape.heads * shape.head_dim
    merge = out_elems * hw.merge_bytes / (hw.hbm_tbps * 1e12)
    accumulate = (kv_elems * hw.kv_grad_bytes + out_elems * hw.q_grad_bytes) / (hw.hbm_tbps * 1e12)

    def block(step: int, direction: str) -> float:
        if step == 0:
            return kernel(L, L, shape.causal, direction)
        return kernel(L, L // 2, False, direction) if shape.causal else kernel(L, L, False, direction)

    fwd = sum(max(block(s, "fwd") + merge, m_kv) for s in range(n - 1)) + block(n - 1, "fwd") + merge
    bwd = sum(max(block(s, "bwd") + accumulate, m_kv + (m_dkv if s > 0 else 0.0)) for s in range(n - 1))
    bwd += block(n - 1, "bwd") + accumulate + (m_dkv if n > 1 else 0.0)
    one_fwd = kernel(shape.seqlen, shape.seqlen, shape.causal, "fwd")
    one_bwd = kernel(shape.seqlen, shape.seqlen, shape.causal, "bwd")
    return Prediction(n, shape.seqlen, fwd * 1e3, bwd * 1e3, one_fwd * 1e3, one_bwd * 1e3,
                      m_kv / block(1 if n > 1 else 0, "fwd"))


def table(hw: Hardware, seqlens, worlds, heads: int, heads_k: int, head_dim: int) -> str:
    rows = ["| seqlen | causal | GPUs | local L | fwd ms | fwd eff. | bwd ms | bwd eff. | M/C fwd |",
            "|---|---|---|---|---|---|---|---|---|"]
    for causal in (True, False):
        for seqlen in seqlens:
            for world in worlds:
                p = predict(world, Shape(seqlen, heads, heads_k, head_dim, 1, causal), hw)
                rows.append(f"| {seqlen // 1024}k | {int(causal)} | {world} | {seqlen // world} | {p.fwd_ms:.2f} | "
                            f"{p.fwd_efficiency:.2f} | {p.bwd_ms:.2f} | {p.bwd_efficiency:.2f} | "
                            f"{p.comm_over_compute:.2f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fwd-tflops", type=float, default=Hardware.fwd_tflops)
    ap.add_argument("--bwd-tflops", type=float, default=Hardware.bwd_tflops)
    ap.add_argument("--link-gbps", type=float, default=Hardware.link_gbps)
    ap.add_argument("--latency-us", type=float, default=Hardware.latency_us)
    ap.add_argument("--hbm-tbps", type=float, default=Hardware.hbm_tbps)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-k", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlens", default="32768,131072,1048576")
    ap.add_argument("--worlds", default="2,4,8")
    a = ap.parse_args()
    hw = Hardware(a.fwd_tflops, a.bwd_tflops, a.link_gbps, a.latency_us, a.hbm_tbps)
    print(table(hw, [int(s) for s in a.seqlens.split(",")], [int(w) for w in a.worlds.split(",")], a.heads,
                a.heads_k, a.head_dim))


if __name__ == "__main__":
    main()
