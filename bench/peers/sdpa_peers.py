"""Times torch SDPA's FLASH_ATTENTION (FlashAttention-2 inside PyTorch) and CUDNN_ATTENTION
backends over the peers grid, on inputs in our (batch, seqlen, heads, dim) layout (SDPA gets the
transposed view, as a user of that layout calls it). Prints one row per case: the same columns as
flashattn_bench's peers grid, so the two tables can be joined in the same run. First it times a
bf16 GEMM (8192^3, cuBLAS through torch.matmul): the tensor-core rate the GPU reaches in that run,
beside which the attention numbers are read.

--grid decode: the shapes of flashattn_bench's decode grid that SDPA can run (one query over a
dense cache, nothing appended; SDPA has no paged cache), forward, GB/s of K+V read, with the L2
flushed before each timed call as flashattn_bench and fa3_bench.py (triton's do_bench) do. Rows
carry flashattn_bench's decode columns (seqlen_q, seqlen_k, heads_q, heads_k, page_size 0, append)
for join.py, after the copy ceiling of the run (a 2 GiB device copy: GB/s read + written). Needs
torch >= 2.5 for grouped-query heads (enable_gqa).

usage: python3 bench/peers/sdpa_peers.py [--grid peers|decode] [--direction fwd|bwd|both] [--json FILE]
                                         [--gemm-only]
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

BACKENDS = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, warmup=3, repeats=10, l2_flush=None):
    """l2_flush: a buffer larger than the L2, written before each timed call (outside the events)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if l2_flush is not None:
            l2_flush.zero_()
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


def copy_ceiling_gbps(gib=2):
    """Device-to-device copy of `gib` GiB (torch's copy_): bytes read plus bytes written per second,
    the memory bandwidth a streaming kernel reaches in this run (the decode grid's ceiling)."""
    src = torch.empty(gib << 30, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), warmup=3, repeats=20)
    return 2 * src.numel() / ms / 1e6


# flashattn_bench's decode grid on a GPU (bench/grid.cpp, decode_grid): GQA 32/8 over every batch and
# cache length within the K+V budget, and the 64/8 and 32/32 variants at FlashAttention-3's points.
DECODE_SWEEP = dict(batches=(1, 8, 32, 128), lengths=(1024, 4096, 8192, 16384, 32768, 65536, 131072))
DECODE_VARIANT_POINTS = dict(batches=(1, 8, 32), lengths=(8192, 32768, 131072))
DECODE_MAX_KEY_HEADS = 32 * 32768 * 8  # batch * keys * kv heads: 4 GiB of bf16 K+V at d 128


def decode_shapes():
    shapes = [(b, s, 32, 8) for b in DECODE_SWEEP["batches"] for s in DECODE_SWEEP["lengths"]]
    for hq, hk in ((64, 8), (32, 32)):
        shapes += [(b, s, hq, hk) for b in DECODE_VARIANT_POINTS["batches"] for s in DECODE_VARIANT_POINTS["lengths"]]
    return [(b, s, hq, hk) for b, s, hq, hk in shapes if b * s * hk <= DECODE_MAX_KEY_HEADS]


def decode_rows():
    rows = []
    d = 128
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 0)
    l2_flush = torch.empty(max(2 * l2_bytes, 256 << 20), dtype=torch.uint8, device="cuda")
    print(f"{'backend':10} {'batch':>5} {'seqlen_k':>8} {'h_q':>4} {'h_k':>4} {'d':>4} {'ms':>9} {'GB/s':>7}")
    for batch, seqlen_k, hq, hk in decode_shapes():
        q = torch.randn(batch, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, seqlen_k, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        kv_bytes = 2 * batch * seqlen_k * hk * d * 2
        for name, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend):
                    # One query sees every key: SDPA's is_causal (top-left aligned) would hide all but the
                    # first, so the call is non-causal; the row reads causal like ours and FA3's.
                    ms = median_ms(lambda: sdpa(qt, kt, vt, enable_gqa=hk != hq), l2_flush=l2_flush)
            except (RuntimeError, TypeError) as e:  # a backend that refuses the shape; torch < 2.5
                print(f"{name:10} {batch:5} {seqlen_k:8} {hq:4} {hk:4} {d:4} unsupported: {str(e)[:60]}")
                continue
            gbps = kv_bytes / ms / 1e6
            rows.append(dict(backend=name, dtype="bfloat16", batch=batch, seqlen_q=1, seqlen_k=seqlen_k,
                             heads_q=hq, heads_k=hk, head_dim=d, causal=True, direction="fwd", median_ms=ms,
                             tflops=4 * batch * hq * seqlen_k * d / ms / 1e9, gbps=gbps, page_size=0,
                             append=False))
            print(f"{name:10} {batch:5} {seqlen_k:8} {hq:4} {hk:4} {d:4} {ms:9.3f} {gbps:7.0f}")
        del q, k, v, qt, kt, vt
    return rows


def peers_rows(direction):
    rows = []
    print(f"{'backend':10} {'batch':>5} {'seqlen':>7} {'heads':>5} {'d':>4} {'causal':>6} {'dir':>4} {'ms':>9} {'TFLOP/s':>8}")
    for d in (64, 128, 256):
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            batch, heads = 16384 // seqlen, 2048 // d
            for causal in (0, 1):
                q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
                for name, backend in BACKENDS.items():
                    for mode in ("fwd", "bwd"):
                        if direction not in (mode, "both"):
                            continue
                        try:
                            with sdpa_kernel(backend):
                                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                                if mode == "fwd":
                                    ms = median_ms(lambda: sdpa(qt, kt, vt, is_causal=bool(causal)))
                                    work = flops
                                else:
                                    qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))
                                    out = sdpa(qg, kg, vg, is_causal=bool(causal))
                                    grad = torch.randn_like(out)
                                    ms = median_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), grad, retain_graph=True))
                                    work = 2.5 * flops
                        except RuntimeError as e:  # a backend that refuses the shape
                            print(f"{name:10} {batch:5} {seqlen:7} {heads:5} {d:4} {causal:6} {mode:>4} unsupported: {str(e)[:60]}")
                            continue
                        tflops = work / ms / 1e9
                        rows.append(dict(backend=name, batch=batch, seqlen=seqlen, heads=heads, head_dim=d,
                                         causal=causal, direction=mode, ms=ms, tflops=tflops))
                        print(f"{name:10} {batch:5} {seqlen:7} {heads:5} {d:4} {causal:6} {mode:>4} {ms:9.3f} {tflops:8.1f}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="peers", choices=["peers", "decode"])
    ap.add_argument("--direction", default="fwd", choices=["fwd", "bwd", "both"], help="peers grid only")
    ap.add_argument("--json")
    ap.add_argument("--gemm-only", action="store_true", help="time the bf16 GEMM only")
    args = ap.parse_args()
    print(f"# torch {torch.__version__} | {torch.cuda.get_device_name()} | bf16 | {args.grid} grid")
    print(f"# bf16 GEMM 8192^3 (cuBLAS, torch.matmul): {gemm_tflops():.1f} TFLOP/s")
    if args.gemm_only:
        return
    if args.grid == "decode":
        print(f"# copy ceiling (2 GiB device copy, read + write): {copy_ceiling_gbps():.0f} GB/s")
    rows = decode_rows() if args.grid == "decode" else peers_rows(args.direction)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
