"""A real client: Hugging Face Transformers through the flashattn.compat shims, for
attn_implementation="flash_attention_2" (the flash_attn shim) and "flash_attention_3" (FA3's
flash_attn_interface shim).

* On the GPU: a small randomly initialised Llama-style model (GQA, causal, a padded batch so that
  its varlen path is used) with each flash implementation, against the same model on SDPA: logits,
  and a training step's gradients. Skips without CUDA, or while the library reports the GPU call
  unsupported.
* On the CPU: Transformers' own flash-attention entry (_flash_attention_forward, which unpads a
  padded batch, calls our flash_attn_varlen_func with the arguments it chooses, and pads back) on
  CPU tensors. Transformers declares flash_attn unavailable without CUDA, so for flash_attention_2
  that one check is patched (its flash_attention_3 path imports flash_attn_interface without one);
  everything after it is Transformers' code. And the package metadata Transformers checks for
  FlashAttention-3.

Both run in a subprocess: the shim must be installed before transformers is imported, and the
test must not leave it installed in the pytest process."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CPU_SCRIPT = textwrap.dedent("""
    import functools, json, sys
    import flashattn, flashattn.compat
    flashattn.compat.install()
    import torch, transformers
    import transformers.modeling_flash_attention_utils as mfa
    from flashattn import reference
    implementation = sys.argv[1]
    mfa.is_flash_attn_2_available = lambda *args, **kwargs: True  # its only objection: no CUDA
    calls = []
    import flash_attn_interface, flash_attn
    module = flash_attn_interface if implementation == "flash_attention_3" else flash_attn
    original = module.flash_attn_varlen_func
    @functools.wraps(original)  # Transformers passes only the arguments the signature names
    def counted(*args, **kwargs):
        calls.append(sorted(kwargs))
        return original(*args, **kwargs)
    module.flash_attn_varlen_func = counted
    torch.manual_seed(0)
    batch, seqlen, heads, heads_k, d = 3, 12, 4, 2, 32
    q, k, v = (torch.randn(batch, seqlen, n, d, dtype=torch.bfloat16) for n in (heads, heads_k, heads_k))
    mask = torch.ones(batch, seqlen, dtype=torch.int64)
    mask[1, :5] = 0   # left padding
    mask[2, 9:] = 0   # right padding
    out = mfa._flash_attention_forward(q, k, v, mask, seqlen, is_causal=True, attn_implementation=implementation)
    result = {"shape": list(out.shape), "err_ours": 0.0, "err_bf16": 0.0, "out_max": 0.0, "calls": calls}
    for b in range(batch):
        keep = mask[b].bool()
        exact = reference.attention_reference(*(x[b:b + 1, keep].double() for x in (q, k, v)), causal=True)[0]
        low = reference.attention_reference(*(x[b:b + 1, keep] for x in (q, k, v)), causal=True)[0]
        result["err_ours"] = max(result["err_ours"], (out[b:b + 1, keep].double() - exact).abs().max().item())
        result["err_bf16"] = max(result["err_bf16"], (low.double() - exact).abs().max().item())
        result["out_max"] = max(result["out_max"], exact.abs().max().item())
    print(json.dumps(result))
""")


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flash_attention_3"])
def test_transformers_flash_attention_forward_on_cpu(implementation):
    proc = subprocess.run([sys.executable, "-c", CPU_SCRIPT, implementation], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["shape"] == [3, 12, 4, 32]
    assert len(result["calls"]) == 1, result["calls"]  # the padded batch went through our varlen function
    floor = 2.0 ** -8 * max(1.0, result["out_max"])
    assert result["err_ours"] <= 2 * result["err_bf16"] + floor, result


SCRIPT = textwrap.dedent("""
    import copy, functools, json, sys
    import flashattn, flashattn.compat
    flashattn.compat.install()
    flash = sys.argv[1]  # flash_attention_2 or flash_attention_3
    # Count the varlen calls (the padded-batch path), patched before Transformers looks it up.
    import flash_attn, flash_attn.flash_attn_interface, flash_attn_interface, flash_attn_3.flash_attn_interface
    calls = {"varlen": 0, "dense": 0}
    def counted(name, function):
        @functools.wraps(function)  # Transformers passes only the arguments the signature names
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper
    if flash == "flash_attention_2":
        modules, provider = (flash_attn, flash_attn.flash_attn_interface), flashattn.interface
    else:
        modules, provider = (flash_attn_interface, flash_attn_3.flash_attn_interface), flashattn.fa3_interface
    for module in modules:
        module.flash_attn_varlen_func = counted("varlen", provider.flash_attn_varlen_func)
        module.flash_attn_func = counted("dense", provider.flash_attn_func)
    import torch, transformers
    from transformers import AutoModelForCausalLM, LlamaConfig
    from transformers.utils import is_flash_attn_2_available
    try:
        from transformers.utils import is_flash_attn_3_available
    except ImportError:
        is_flash_attn_3_available = lambda: False
    available = is_flash_attn_2_available() if flash == "flash_attention_2" else is_flash_attn_3_available()
    result = {"transformers": transformers.__version__, "available": bool(available)}
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
    dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    models = {}
    for impl in ("sdpa", flash):
        torch.manual_seed(0)
        with torch.device("cuda"):  # Transformers wants flash_attention_2 models made on the GPU
            models[impl] = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl,
                                                            **{dtype_kw: torch.bfloat16})
        if models[impl].config._attn_implementation != impl and hasattr(models[impl], "set_attn_implementation"):
            models[impl].set_attn_implementation(impl)
    models[flash].load_state_dict(models["sdpa"].state_dict())
    reference = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa",
                                                 **{dtype_kw: torch.float32}).cuda()
    reference.load_state_dict(models["sdpa"].state_dict())

    ids = torch.randint(0, 512, (3, 40), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :11] = 0   # left padding, as in batched generation
    mask[2, 33:] = 0   # right padding, as in training
    try:
        with torch.no_grad():
            logits = {name: m(input_ids=ids, attention_mask=mask).logits.float() for name, m in
                      list(models.items()) + [("fp32", reference)]}
    except flashattn.UnsupportedError as e:
        result["unsupported"] = str(e)
        print(json.dumps(result)); sys.exit(0)
    keep = mask.bool()
    exact = logits["fp32"][keep]
    result["err_ours"] = (logits[flash][keep] - exact).abs().max().item()
    result["err_sdpa"] = (logits["sdpa"][keep] - exact).abs().max().item()
    result["logit_max"] = exact.abs().max().item()
    result["varlen_calls"], result["dense_calls"] = calls["varlen"], calls["dense"]
    result["attn_implementation"] = models[flash].config._attn_implementation

    labels = ids.masked_fill(~keep, -100)
    grads = {}
    try:
        for name, m in list(models.items()) + [("fp32", reference)]:
            m.zero_grad()
            m(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            grads[name] = {n: p.grad.float() for n, p in m.named_parameters() if "self_attn" in n}
    except flashattn.UnsupportedError as e:
        result["backward_unsupported"] = str(e)
        print(json.dumps(result)); sys.exit(0)
    result["grad_err_ours"] = max((grads[flash][n] - g).abs().max().item()
                                  for n, g in grads["fp32"].items())
    result["grad_err_sdpa"] = max((grads["sdpa"][n] - g).abs().max().item() for n, g in grads["fp32"].items())
    result["grad_max"] = max(g.abs().max().item() for g in grads["fp32"].values())
    print(json.dumps(result))
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="Transformers' flash attention models need CUDA")
@pytest.mark.parametrize("flash", ["flash_attention_2", "flash_attention_3"])
def test_llama_flash_attention_through_the_shim(flash):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, flash], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["available"], f"Transformers {result['transformers']} did not accept the shim for {flash}"
    if "unsupported" in result:
        pytest.skip(f"library reports unsupported: {result['unsupported']}")
    assert result["attn_implementation"] == flash, result
    # The padded batch went through flash_attn_varlen_func (unpad_input / pad_input).
    assert result["varlen_calls"] > 0, result
    # Same rule as elsewhere: within 2x of what SDPA errs by in bf16, plus one bf16 ulp of the logits.
    floor = 2.0 ** -8 * max(1.0, result["logit_max"])
    assert result["err_ours"] <= 2 * result["err_sdpa"] + floor, result
    if "backward_unsupported" in result:
        pytest.skip(f"forward checked; backward: library reports unsupported: {result['backward_unsupported']}")
    grad_floor = 2.0 ** -8 * max(1.0, result["grad_max"])
    assert result["grad_err_ours"] <= 2 * result["grad_err_sdpa"] + grad_floor, result


METADATA_SCRIPT = textwrap.dedent("""
    import flashattn.compat
    flashattn.compat.install()
    import transformers.modeling_flash_attention_utils as mfa
    # The package check behind is_flash_attn_3_available() (which also wants CUDA): Transformers
    # >= 4.57 keeps it in this matrix; older ones check importlib for "flash_attn_3".
    matrix = getattr(mfa, "FLASH_ATTENTION_COMPATIBILITY_MATRIX", None)
    if matrix is not None:
        assert matrix[3]["pkg_availability_check"](), "FA3's package check failed"
        assert matrix[2]["pkg_availability_check"](), "FA2's package check failed"
    from transformers.utils.import_utils import _is_package_available
    assert _is_package_available("flash_attn_3")[0] and _is_package_available("flash_attn_interface")[0]
    print("ok")
""")


def test_transformers_sees_flash_attention_3_installed():
    proc = subprocess.run([sys.executable, "-c", METADATA_SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("ok")
