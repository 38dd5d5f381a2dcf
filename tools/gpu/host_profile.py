"""Where the host time of one flashattn forward call goes (tools/gpu/host_overhead.py measures the
total): cProfile of flash_attn_func with the GPU kept busy, the extension call on its own, and the
CUDA runtime calls the torch profiler sees during the calls.

usage (on the GPU machine, after `python3 -m pip install --no-build-isolation .`):
  python3 tools/gpu/host_profile.py [--shape 1x16384] [--calls 200] [--backward] [--pieces]

--pieces also times the steps of one forward on their own (the stream lookup both ways, an output
allocation, the rng state, a DLPack export, the workspace callbacks, the direct-call test, the
interface's argument checks, the extension up to the library's first argument check).
"""
import argparse
import cProfile
import pstats

import torch

import flashattn.compat

flashattn.compat.install()
from flash_attn import flash_attn_func  # noqa: E402
from flashattn import _ext, torch_ops  # noqa: E402

from host_overhead import HEAD_DIM, HEADS_Q, make_qkv, median_host_us  # noqa: E402  (beside this file)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1x16384")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--pieces", action="store_true")
    a = ap.parse_args()
    batch, seqlen = map(int, a.shape.split("x"))
    rg = a.backward
    q, k, v = make_qkv(batch, seqlen, rg)
    out = torch.empty(batch, seqlen, HEADS_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(batch, HEADS_Q, seqlen, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    scale = HEAD_DIM ** -0.5

    def full():
        o = flash_attn_func(q, k, v, causal=True)
        if rg:
            o.sum().backward()

    def custom_op():
        torch_ops.fwd(q.detach(), k.detach(), v.detach(), None, None, None, seqlen, seqlen, scale, True, -1, -1, 0.0,
                      None, 0.0, 0)

    def implementation():  # the op's implementation without the dispatcher, where it is a function of its own
        torch_ops._fwd(q.detach(), k.detach(), v.detach(), None, None, None, seqlen, seqlen, scale, True, -1, -1, 0.0,
                       None, 0.0, 0)

    def extension(workspace=None, export=lambda t: t, softcap=0.0):  # export: the tensors as handed over
        _ext.fwd(export(q.detach()), export(k.detach()), export(v.detach()), export(out), softmax_lse=export(lse),
                 cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, max_seqlen_q=seqlen, max_seqlen_k=seqlen,
                 softmax_scale=scale, causal=True, window_left=-1, window_right=-1, softcap=softcap, alibi_slopes=None,
                 dropout_p=0.0, dropout_seed=0, dropout_offset=0, num_splits=0, block_table=None, q_descale=None,
                 k_descale=None, v_descale=None, float8_views=[], stream=stream, workspace=workspace)

    def outputs_and_stream():  # what the implementation does around the extension call, without it
        torch.empty_like(out), torch.empty_like(lse), torch_ops._stream(q)

    with torch.set_grad_enabled(rg):
        layers = [("flash_attn_func", full), ("torch_ops.fwd (custom op)", custom_op)]
        if hasattr(torch_ops, "_fwd"):
            layers.append(("torch_ops._fwd (implementation)", implementation))
        layers.append(("_ext.fwd (extension)", extension))
        if hasattr(torch_ops, "_workspace"):  # the scratch from torch's allocator, as the implementation
            layers.append(("_ext.fwd, torch's workspace", lambda: extension(torch_ops._workspace(q))))
        layers.append(("_ext.fwd, DLPack capsules", lambda: extension(export=torch.utils.dlpack.to_dlpack)))
        layers.append(("two outputs and the stream", outputs_and_stream))
        for name, fn in layers:
            print_host_time(name, fn, a.calls)

        if a.pieces:
            # softcap < 0: the tensors are converted, and the library refuses the call at its checks
            time_pieces(q, k, v, out, stream, lambda: extension(softcap=-1.0), a.calls)

        prof = cProfile.Profile()
        for _ in range(a.calls):
            torch.cuda._sleep(5_000_000)
            prof.enable()
            full()
            prof.disable()
            torch.cuda.synchronize()
        stats = pstats.Stats(prof)
        print(f"\n== cProfile of {a.calls} flash_attn_func calls, by own time")
        stats.sort_stats("tottime").print_stats(25)
        print("\n== by cumulative time")
        stats.sort_stats("cumulative").print_stats(30)

        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(20):
                torch.cuda._sleep(5_000_000)
                full()
                torch.cuda.synchronize()
        print("\n== torch profiler, 20 calls, by self CPU time")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))


def time_pieces(q, k, v, out, stream, refused_extension, calls):
    """Median host microseconds of each step of one forward, alone, with the GPU busy."""
    from flashattn import interface

    qd = q.detach()
    alloc, release = torch_ops._TORCH_WORKSPACE

    pieces = [
        ("torch.cuda.current_stream(dev).cuda_stream", lambda: torch.cuda.current_stream(qd.device).cuda_stream),
        ("torch._C._cuda_getCurrentRawStream(index)", lambda: torch._C._cuda_getCurrentRawStream(qd.device.index)),
        ("torch.empty (the output)", lambda: torch.empty(out.shape, dtype=out.dtype, device=qd.device)),
        ("torch.zeros(2) CPU + tolist (rng state)", lambda: torch.zeros(2, dtype=torch.int64).tolist()),
        ("q.__dlpack__()", lambda: qd.__dlpack__()),
        ("torch.utils.dlpack.to_dlpack(q)", lambda: torch.utils.dlpack.to_dlpack(qd)),
        ("workspace alloc + release (4 B)", lambda: release(alloc(4, stream))),
        ("_direct_call_ok(q, k, v, 4 x None)", lambda: torch_ops._direct_call_ok(q, k, v, None, None, None, None)),
        ("q.detach()", lambda: q.detach()),
        ("interface._Call (argument checks)", lambda: interface._Call(q, k, v, varlen=False, causal=True)),
        ("_ext.fwd refused (softcap < 0)", refused_extension),
    ]
    print("\n== pieces of one forward, each alone", flush=True)
    for name, fn in pieces:
        print_host_time(name, fn, calls)


def print_host_time(name, fn, calls):
    """Prints fn's median host time over calls calls with the GPU busy, after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    print(f"{name}: {median_host_us(fn, calls, 5_000_000):.2f} us median host time", flush=True)


if __name__ == "__main__":
    main()
