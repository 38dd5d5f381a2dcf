"""Times torch SDPA's FLASH_ATTENTION (FlashAttention-2 inside PyTorch) and CUDNN_ATTENTION
backends over the peers grid, on inputs in our (batch, seqlen, heads, dim) layout (SDPA gets the
transposed view, as a user of that layout calls it). Prints one row per case: the same columns as
flashattn_bench's peers grid, so the two tables can be joined in the same run. First it times a
bf16 GEMM (8192^3, cuBLAS through torch.matmul): the tensor-core rate the GPU reaches in that run,
beside which the attention numbers are read.

usage: python3 bench/peers/sdpa_peers.py [--direction fwd|bwd|both] [--json FILE] [--gemm-only]
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

BACKENDS = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, warmup=3, repeats=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def gemm_tflops(n=8192):
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ms = median_ms(lambda: torch.matmul(a, b), warmup=5, repeats=20)
    return 2 * n**3 / ms / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--direction", default="fwd", choices=["fwd", "bwd", "both"])
    ap.add_argument("--json")
    ap.add_argument("--gemm-only", action="store_true", help="time the bf16 GEMM only")
    args = ap.parse_args()
    rows = []
    print(f"# torch {torch.__version__} | {torch.cuda.get_device_name()} | bf16 | peers grid")
    print(f"# bf16 GEMM 8192^3 (cuBLAS, torch.matmul): {gemm_tflops():.1f} TFLOP/s")
    if args.gemm_only:
        return
    print(f"{'backend':10} {'batch':>5} {'seqlen':>7} {'heads':>5} {'d':>4} {'causal':>6} {'dir':>4} {'ms':>9} {'TFLOP/s':>8}")
    for d in (64, 128, 256):
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            batch, heads = 16384 // seqlen, 2048 // d
            for causal in (0, 1):
                q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
                for name, backend in BACKENDS.items():
                    for direction in ("fwd", "bwd"):
                        if args.direction not in (direction, "both"):
                            continue
                        try:
                            with sdpa_kernel(backend):
                                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                                if direction == "fwd":
                                    ms = median_ms(lambda: sdpa(qt, kt, vt, is_causal=bool(causal)))
                                    work = flops
                                else:
                                    qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))
                                    out = sdpa(qg, kg, vg, is_causal=bool(causal))
                                    grad = torch.randn_like(out)
                                    ms = median_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), grad, retain_graph=True))
                                    work = 2.5 * flops
                        except RuntimeError as e:  # a backend that refuses the shape
                            print(f"{name:10} {batch:5} {seqlen:7} {heads:5} {d:4} {causal:6} {direction:>4} unsupported: {str(e)[:60]}")
                            continue
                        tflops = work / ms / 1e9
                        rows.append(dict(backend=name, batch=batch, seqlen=seqlen, heads=heads, head_dim=d,
                                         causal=causal, direction=direction, ms=ms, tflops=tflops))
                        print(f"{name:10} {batch:5} {seqlen:7} {heads:5} {d:4} {causal:6} {direction:>4} {ms:9.3f} {tflops:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
