"""A Hugging Face Transformers Llama training step as users run it: forward + backward of a randomly
initialised model (6 layers, hidden 2048, 16 query / 4 KV heads, bf16), timed with
attn_implementation="flash_attention_2" (flashattn through flashattn.compat) and with "sdpa", in the
same process. Prints one JSON line per (implementation, shape): median step ms, tokens/s, peak
memory, and the ratio to SDPA.

usage (on the GPU machine, after `python3 -m pip install --no-build-isolation .`):
  python3 tools/gpu/llama_step.py [--shapes 4x4096,1x16384] [--steps 10] [--json FILE] [--profile]
                                  [--no-packed-check]

--no-packed-check (a measurement, not a setting to train with): Transformers' flash-attention
path asks, at batch 1, whether position_ids hold packed sequences, and reads the answer on the
host: one device synchronisation per layer and forward, which SDPA's path does not make. The flag
replaces that check with False (true here: the step's positions are 0..seqlen-1), so the two runs
show what the synchronisation costs the step.
"""
import argparse
import json
import subprocess
import sys
import textwrap

STEP = textwrap.dedent("""
    import json, sys, time
    impl, batch, seqlen, steps, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
    packed_check = sys.argv[6] == "1"
    if impl == "flash_attention_2":
        import flashattn.compat
        flashattn.compat.install()
    import torch, transformers
    import transformers.modeling_flash_attention_utils as fa_utils
    # Counted either way, so the output shows that the check is the module global the path calls.
    packed_calls = [0]
    checked = fa_utils._is_packed_sequence if packed_check else (lambda position_ids, batch_size: False)
    def counted_check(position_ids, batch_size):
        packed_calls[0] += 1
        return checked(position_ids, batch_size)
    fa_utils._is_packed_sequence = counted_check
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=6,
                                      num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                      max_position_embeddings=max(seqlen, 4096))
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=impl, torch_dtype=torch.bfloat16).cuda()
    model.train()
    ids = torch.randint(0, config.vocab_size, (batch, seqlen), device="cuda")
    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        model.zero_grad(set_to_none=True)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); step(); stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    checks_per_step = packed_calls[0] / (3 + steps)
    ms = times[len(times) // 2]
    row = {"impl": impl, "batch": batch, "seqlen": seqlen, "packed_check": packed_check,
           "packed_checks_per_step": checks_per_step, "median_ms": ms,
           "tokens_per_s": batch * seqlen / ms * 1e3, "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    if profile:
        # One more step under the profiler: GPU time per kernel, the attention kernels' share
        # (ours: flashattn's fa2/fa3/gpu namespaces; SDPA: flash, cuDNN, efficient-attention
        # kernels), and the kernels that take the most.
        from torch.profiler import ProfilerActivity, profile as torch_profile
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kernels = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:  # kernels and copies on the GPU
                kernels[ev.name] = kernels.get(ev.name, 0.0) + ev.time_range.elapsed_us() / 1e3
        attention = ("flashattn::", "flash", "fmha", "cudnn", "attention", "sdpa")
        row["cuda_ms"] = sum(kernels.values())
        row["attention_ms"] = sum(t for n, t in kernels.items() if any(a in n.lower() for a in attention))
        row["top_kernels"] = [[n[:120], round(t, 3)] for n, t in sorted(kernels.items(), key=lambda kv: -kv[1])[:20]]
    print(json.dumps(row))
""")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4x4096,1x16384")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one step: GPU ms of all kernels and of the attention kernels, the top 20 kernels")
    ap.add_argument("--no-packed-check", action="store_true",
                    help="replace Transformers' packed-sequence check (a host sync at batch 1) with False")
    a = ap.parse_args()
    rows = []
    for shape in a.shapes.split(","):
        batch, seqlen = map(int, shape.split("x"))
        by_impl = {}
        for impl in ("sdpa", "flash_attention_2"):
            # A process per run: the shim must be installed before transformers is imported, and
            # each run's peak memory is its own.
            proc = subprocess.run([sys.executable, "-c", STEP, impl, str(batch), str(seqlen), str(a.steps), str(int(a.profile)),
                                   str(int(not a.no_packed_check))],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{impl} {shape}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            by_impl[impl] = json.loads(proc.stdout.strip().splitlines()[-1])
        for impl, row in by_impl.items():
            if "sdpa" in by_impl:
                row["speed_vs_sdpa"] = by_impl["sdpa"]["median_ms"] / row["median_ms"]
                row["peak_gib_minus_sdpa"] = row["peak_gib"] - by_impl["sdpa"]["peak_gib"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
