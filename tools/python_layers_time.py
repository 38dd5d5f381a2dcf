"""Host time of the Python package's own layers, without a GPU: the extension's library calls are
replaced by no-ops, so what is timed is the interface's argument checks, autograd.Function, the op
dispatch and the implementations' tensor set-up, on tiny CPU tensors. Its numbers are this CPU's,
not the device host's; use it to compare two versions of the Python code on one machine.

Prints one line per call path: the median microseconds of --calls calls, the lowest of --rounds
rounds (the rounds interleave the paths, so a busy spell of this machine does not pick one path).

usage (torch in the interpreter, e.g. FA_WITH_TORCH=1 bash tools/test_python.sh once, then):
  build/python-venv/bin/python tools/python_layers_time.py [--calls 2000] [--rounds 5] [--profile]
"""
import argparse
import cProfile
import pstats
import time

import torch

from flashattn import flash_attn_func, flash_attn_with_kvcache, torch_ops


def median_us(fn, calls):
    for _ in range(calls // 10):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[calls // 2] * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile flash_attn_func with grad")
    args = parser.parse_args()
    for name in ("fwd", "bwd", "fwd_kvcache", "combine"):
        setattr(torch_ops._ext, name, lambda *a, **kw: None)  # a status of None is success

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    fwd_args = (None, None, None, 8, 8, 0.25, True, -1, -1, 0.0, None, 0.0, 1)
    q1 = torch.randn(1, 1, 8, 64, generator=g)
    k_cache, v_cache = (torch.randn(1, 64, 2, 64, generator=g) for _ in range(2))
    cache_seqlens = torch.tensor([40], dtype=torch.int32)
    paths = {}
    if hasattr(torch_ops, "_fwd"):  # where eager calls run the op's implementation directly
        paths["torch_ops._fwd (direct)"] = lambda: torch_ops._fwd(q, k, v, *fwd_args)
    paths.update({
        "torch.ops.flashattn.fwd (op)": lambda: torch.ops.flashattn.fwd(q, k, v, *fwd_args),
        "flash_attn_func, no grad": lambda: flash_attn_func(q, k, v, causal=True),
        "flash_attn_func, grad": lambda: flash_attn_func(qg, kg, vg, causal=True),
        "flash_attn_with_kvcache": lambda: flash_attn_with_kvcache(q1, k_cache, v_cache,
                                                                   cache_seqlens=cache_seqlens, causal=True),
    })
    best = {name: median_us(fn, args.calls) for name, fn in paths.items()}
    for _ in range(args.rounds - 1):
        for name, fn in paths.items():
            best[name] = min(best[name], median_us(fn, args.calls))
    for name, us in best.items():
        print(f"{name:32} {us:8.1f} us")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            paths["flash_attn_func, grad"]()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
