"""FP8 (float8_e4m3fn) forward through FlashAttention-3's interface on torch CPU tensors (the CPU
backend, the fp8 kernels' oracle): the output against attention over the dequantised inputs, the
semantics of q_descale/k_descale/v_descale (per sequence and kv head, q's by its group),
flashattn.quantize_fp8, torch.compile, and the errors that name their argument."""
from __future__ import annotations

import numpy as np
import pytest

import flashattn
from flashattn import fa3_interface as fa3
from flashattn import reference

torch = pytest.importorskip("torch")

FP8 = torch.float8_e4m3fn


def fp8_inputs(batch=2, seqlen_q=37, seqlen_k=53, heads=6, heads_k=2, d=64, seed=0):
    """Quantised random q, k, v and their descales (q's per kv head, as FA3 takes them), plus
    descales that differ per (batch, kv head) beyond what quantize_fp8 picks."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((batch, seqlen_q, heads, d), generator=g)
    k = torch.randn((batch, seqlen_k, heads_k, d), generator=g) * 3
    v = torch.randn((batch, seqlen_k, heads_k, d), generator=g) * 0.5
    q8, qd = flashattn.quantize_fp8(q, heads_k=heads_k)
    k8, kd = flashattn.quantize_fp8(k)
    v8, vd = flashattn.quantize_fp8(v)
    return q8, k8, v8, qd, kd, vd


def dequantised(x8, descale, group=1, seq_of_row=None):
    """x8 * its factor as float64, from the semantics alone: row r of sequence b, head h takes
    descale[b, h // group]. Dense (batch, seqlen, heads, d), or varlen rows with seq_of_row."""
    x = x8.double()
    per_head = descale.double().repeat_interleave(group, dim=1)  # (batch, heads)
    if seq_of_row is None:
        return x * per_head[:, None, :, None]
    return x * per_head[seq_of_row][:, :, None]


def p_rounded_to_e4m3(q, k, v, causal=False):
    """Attention in float64 with only what FA3's fp8 forward rounds: P = exp2(logits * log2(e) -
    row max + 8) rounded to e4m3, divided by the row sum of the unrounded P. Dense (batch, seqlen,
    heads, d) float64 inputs, k and v with heads_k heads; causal is bottom-right."""
    group = q.shape[2] // k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(group, 1), v.transpose(1, 2).repeat_interleave(group, 1)
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = logits.shape[-2:]
        visible = torch.ones((sq, sk), dtype=torch.bool).tril(sk - sq)
        logits = logits.masked_fill(~visible, float("-inf"))
    log2_weights = logits * np.log2(np.e)
    p = torch.exp2(log2_weights - log2_weights.amax(-1, keepdim=True) + 8).float()
    out = (p.to(FP8).double() @ v) / p.double().sum(-1, keepdim=True)
    return out.transpose(1, 2)


def assert_within_bf16(out, ref):
    """The CPU fp8 path rounds only its bfloat16 output: within one bf16 rounding of the exact
    attention over the dequantised inputs."""
    assert out.dtype == torch.bfloat16
    ref = np.asarray(ref, dtype=np.float64)
    err = np.abs(out.double().numpy() - ref).max()
    assert err <= 2.0 ** -8 * max(1.0, np.abs(ref).max()), err


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_matches_attention_on_dequantised_inputs(causal, softcap):
    q8, k8, v8, qd, kd, vd = fp8_inputs()
    out = fa3.flash_attn_func(q8, k8, v8, causal=causal, softcap=softcap, q_descale=qd, k_descale=kd, v_descale=vd)
    ref, _, _ = reference.attention_reference(
        dequantised(q8, qd, group=3).numpy(), dequantised(k8, kd).numpy(), dequantised(v8, vd).numpy(),
        causal=causal, softcap=softcap)
    assert_within_bf16(out, ref)


def test_each_descale_is_optional():
    q8, k8, v8, qd, kd, vd = fp8_inputs(seed=1)
    out = fa3.flash_attn_func(q8, k8, v8, k_descale=kd)
    ones = torch.ones_like(qd)
    ref, _, _ = reference.attention_reference(
        dequantised(q8, ones, group=3).numpy(), dequantised(k8, kd).numpy(), dequantised(v8, ones).numpy())
    assert_within_bf16(out, ref)


def test_varlen_descales_are_per_sequence():
    g = torch.Generator().manual_seed(2)
    lens_q, lens_k = [5, 0, 31], [17, 9, 40]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32)
    q = torch.randn((sum(lens_q), 4, 32), generator=g)
    k = torch.randn((sum(lens_k), 2, 32), generator=g)
    v = torch.randn((sum(lens_k), 2, 32), generator=g)
    # Sequences of very different magnitudes: one factor for all would lose the small ones.
    k[cu_k[2]:] *= 20
    q8, qd = flashattn.quantize_fp8(q, heads_k=2, cu_seqlens=cu_q)
    k8, kd = flashattn.quantize_fp8(k, cu_seqlens=cu_k)
    v8, vd = flashattn.quantize_fp8(v, cu_seqlens=cu_k)
    assert qd.shape == kd.shape == (3, 2) and qd[1].eq(1).all()  # an empty sequence gets 1
    out = fa3.flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                     q_descale=qd, k_descale=kd, v_descale=vd)
    seq_q = torch.repeat_interleave(torch.arange(3), torch.tensor(lens_q))
    seq_k = torch.repeat_interleave(torch.arange(3), torch.tensor(lens_k))
    ref, _ = reference.varlen_attention_reference(
        dequantised(q8, qd, 2, seq_q).numpy(), dequantised(k8, kd, 1, seq_k).numpy(),
        dequantised(v8, vd, 1, seq_k).numpy(), cu_q.tolist(), cu_k.tolist(), causal=True)
    assert_within_bf16(out, ref)


def test_qkvpacked_fp8():
    q8, k8, v8, qd, kd, vd = fp8_inputs(seqlen_k=37, heads=2, heads_k=2)
    qkv = torch.stack([q8.view(torch.uint8), k8.view(torch.uint8), v8.view(torch.uint8)], dim=2).view(FP8)
    out = fa3.flash_attn_qkvpacked_func(qkv, q_descale=qd, k_descale=kd, v_descale=vd)
    torch.testing.assert_close(out, fa3.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd),
                               atol=0, rtol=0)


def test_relative_error_against_bf16_attention():
    """Against bf16 attention on the same (fp8-rounded) inputs, the bound FA3's own fp8 kernel
    meets with P rounded to fp8; the CPU path, which does not round P, sits far inside it. This
    checks quantize_fp8's factors in the layout the fp8 call reads them."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((2, 256, heads, 128), generator=g, dtype=torch.float32).bfloat16()
               for heads in (8, 2, 2))
    q8, qd = flashattn.quantize_fp8(q, heads_k=2)
    k8, kd = flashattn.quantize_fp8(k)
    v8, vd = flashattn.quantize_fp8(v)
    for causal in (False, True):
        out = fa3.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
        ref = fa3.flash_attn_func(*(dequantised(x, d, grp).bfloat16() for x, d, grp in ((q8, qd, 4), (k8, kd, 1),
                                                                                      (v8, vd, 1))), causal=causal)
        relative = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        assert relative < 0.025, (causal, relative)


def test_quantisation_error_bounds_the_output_error():
    """Against bf16 attention on the original inputs, fp8 adds the rounding of every input to
    e4m3 (three mantissa bits): the output errs by no more than the three inputs' relative errors
    together."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn((2, 256, heads, 64), generator=g).bfloat16() for heads in (4, 4, 4))
    quantised = [flashattn.quantize_fp8(x) for x in (q, k, v)]
    input_errors = [((dequantised(x8, d) - x.double()).norm() / x.double().norm()).item()
                    for (x8, d), x in zip(quantised, (q, k, v))]
    (q8, qd), (k8, kd), (v8, vd) = quantised
    out = fa3.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
    ref = fa3.flash_attn_func(q, k, v)
    relative = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    assert relative <= sum(input_errors), (relative, input_errors)


# ---------------------------------------------------------------------------------------------
# incoherent processing (FA3's remedy for outlier channels)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head_dim", [8, 64, 96, 128, 200, 256])
def test_incoherent_rotation_is_orthogonal_and_seeded(head_dim):
    r = flashattn.incoherent_rotation(head_dim, seed=7)
    assert r.dtype == torch.float32 and r.shape == (head_dim, head_dim)
    torch.testing.assert_close(r.double() @ r.double().T, torch.eye(head_dim, dtype=torch.float64), atol=1e-6, rtol=0)
    assert torch.equal(r, flashattn.incoherent_rotation(head_dim, seed=7))
    assert not torch.equal(r, flashattn.incoherent_rotation(head_dim, seed=8))
    # every channel spread over many: no entry carries much of a row
    assert r.abs().amax() <= 1 / 8 ** 0.5 + 1e-6


def test_incoherent_qk_keeps_the_attention():
    """q R (k R)^T = q k^T: attention (causal, softcap, GQA) over the rotated q and k is the same."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn((2, 40, 6, 96), generator=g)
    k, v = (torch.randn((2, 70, 2, 96), generator=g) for _ in range(2))
    qr, kr = flashattn.incoherent_qk(q, k, seed=2)
    assert qr.dtype == q.dtype and kr.shape == k.shape
    for causal, softcap in ((False, 0.0), (True, 5.0)):
        torch.testing.assert_close(fa3.flash_attn_func(qr, kr, v, causal=causal, softcap=softcap),
                                   fa3.flash_attn_func(q, k, v, causal=causal, softcap=softcap), atol=2e-5, rtol=0)


def test_incoherent_qk_removes_the_error_of_outlier_channels():
    """Two channels of q and k 60x the others: one fp8 factor per head then rounds every other
    channel coarsely, and the logits they carry with it. Rotated first, the fp8 output's error
    against float64 attention on the unquantised inputs drops several-fold (about 6.7x here)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn((2, 64, 4, 128), generator=g, dtype=torch.float64)
    k, v = (torch.randn((2, 128, 4, 128), generator=g, dtype=torch.float64) for _ in range(2))
    for c in (5, 77):
        q[..., c] *= 60
        k[..., c] *= 60
    q, k = q / 8, k / 8
    ref, _, _ = reference.attention_reference(q.numpy(), k.numpy(), v.numpy())

    def fp8_error(q, k):
        (q8, qd), (k8, kd), (v8, vd) = (flashattn.quantize_fp8(x) for x in (q, k, v))
        out = fa3.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
        return float(np.abs(out.double().numpy() - ref).max())

    plain = fp8_error(q, k)
    rotated = fp8_error(*flashattn.incoherent_qk(q, k, seed=1))
    assert rotated * 3 < plain, (plain, rotated)


def test_incoherent_qk_errors_name_the_argument():
    q = torch.randn(1, 4, 2, 64)
    with pytest.raises(flashattn.ArgumentError, match="argument 'k'"):
        flashattn.incoherent_qk(q, torch.randn(1, 4, 2, 32))
    with pytest.raises(flashattn.ArgumentError, match="argument 'rotation'"):
        flashattn.incoherent_qk(q, q, rotation=torch.eye(32))
    with pytest.raises(flashattn.ArgumentError, match="argument 'q'"):
        flashattn.incoherent_qk(q.to(FP8), q)
    with pytest.raises(flashattn.ArgumentError, match="argument 'head_dim'"):
        flashattn.incoherent_rotation(0)


# ---------------------------------------------------------------------------------------------
# quantize_fp8
# ---------------------------------------------------------------------------------------------
def test_quantize_fp8_scales_each_group_to_the_fp8_range():
    g = torch.Generator().manual_seed(5)
    x = torch.randn((3, 20, 6, 16), generator=g, dtype=torch.float32) * torch.tensor([1, 10, 0.01, 5, 5, 5])[:, None]
    x[1, :, 4:] = 0  # a kv head of zeros
    x8, descale = flashattn.quantize_fp8(x, heads_k=3)
    assert x8.dtype == FP8 and x8.shape == x.shape
    assert descale.dtype == torch.float32 and descale.shape == (3, 3) and descale.is_contiguous()
    assert descale[1, 2] == 1
    groups = x.abs().unflatten(2, (3, 2)).amax(dim=(1, 3, 4))  # (batch, heads_k)
    torch.testing.assert_close(descale[groups > 0], (groups / 448)[groups > 0])
    assert x8.float().abs().amax() == 448  # the largest |x| lands on e4m3's largest value
    # Round to nearest e4m3: within half a unit (2^-4 relative) or half the subnormal step.
    back = dequantised(x8, descale, group=2)
    per_head = descale.double().repeat_interleave(2, dim=1)[:, None, :, None]
    bound = torch.maximum(x.double().abs() * 2.0 ** -4, per_head * 2.0 ** -10)
    assert ((back - x.double()).abs() <= bound * 1.0001).all()


def test_quantize_fp8_errors_name_the_argument():
    x = torch.randn(2, 5, 4, 16)
    with pytest.raises(flashattn.ArgumentError, match="argument 'heads_k': must divide the heads of x"):
        flashattn.quantize_fp8(x, heads_k=3)
    with pytest.raises(TypeError, match="argument 'x': must be a torch.Tensor \\(numpy has no fp8 dtype\\)"):
        flashattn.quantize_fp8(x.numpy())
    with pytest.raises(flashattn.DTypeError, match="argument 'x': dtype must be"):
        flashattn.quantize_fp8(x.to(torch.int32))
    with pytest.raises(flashattn.ArgumentError, match="argument 'x': ndim must be 3"):
        flashattn.quantize_fp8(x, cu_seqlens=torch.tensor([0, 5], dtype=torch.int32))


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------
def test_no_backward():
    q8, k8, v8, qd, kd, vd = fp8_inputs()
    q8.requires_grad_()
    with pytest.raises(flashattn.UnsupportedError, match="argument 'q': float8_e4m3fn attention has no backward"):
        fa3.flash_attn_func(q8, k8, v8, q_descale=qd)
    with torch.no_grad():
        assert fa3.flash_attn_func(q8, k8, v8, q_descale=qd).dtype == torch.bfloat16


def test_numpy_has_no_fp8():
    q = np.ones((1, 4, 2, 16), np.float32)
    for name in ("q_descale", "k_descale", "v_descale"):
        with pytest.raises(flashattn.ArgumentTypeError, match=f"argument '{name}': .*numpy has no fp8 dtype") as info:
            fa3.flash_attn_func(q, q, q, **{name: np.ones((1, 2), np.float32)})
        assert info.value.argument == name
    with pytest.raises(flashattn.ArgumentTypeError, match="argument 'k_descale'"):
        fa3.flash_attn_with_kvcache(q, q, q, k_descale=np.ones((1, 2), np.float32))


def test_descales_need_fp8_inputs():
    q = torch.randn(1, 4, 2, 16, dtype=torch.bfloat16)
    with pytest.raises(flashattn.ArgumentError, match="argument 'v_descale': is only for float8_e4m3fn inputs "
                                                      "\\(q is bfloat16"):
        fa3.flash_attn_func(q, q, q, v_descale=torch.ones(1, 2))


def test_descale_rules_name_the_descale():
    q8, k8, v8, qd, kd, vd = fp8_inputs()
    with pytest.raises(flashattn.ArgumentError, match="argument 'q_descale': dim 1 must equal heads_k of k \\(2\\)"):
        fa3.flash_attn_func(q8, k8, v8, q_descale=torch.ones(2, 6))  # per query head: not FA3's layout
    with pytest.raises(flashattn.DTypeError, match="argument 'k_descale': dtype must be float32"):
        fa3.flash_attn_func(q8, k8, v8, k_descale=kd.half())
    with pytest.raises(flashattn.ArgumentError, match="argument 'k': dtype must equal the dtype of 'q'"):
        fa3.flash_attn_func(q8, k8.float(), v8)


def test_fp8_dropout_is_refused():
    q8, k8, v8, *_ = fp8_inputs()
    with pytest.raises(flashattn.ArgumentError, match="argument 'dropout_p': must be 0 with float8_e4m3fn"):
        flashattn.flash_attn_func(q8, k8, v8, dropout_p=0.1)


# ---------------------------------------------------------------------------------------------
# KV cache, torch.compile
# ---------------------------------------------------------------------------------------------
def test_kvcache_appends_fp8_keys_and_attends_over_them():
    g = torch.Generator().manual_seed(6)
    batch, capacity, heads, heads_k, d = 2, 24, 4, 2, 32
    q8, qd = flashattn.quantize_fp8(torch.randn((batch, 1, heads, d), generator=g), heads_k=heads_k)
    k_cache, kd = flashattn.quantize_fp8(torch.randn((batch, capacity, heads_k, d), generator=g))
    v_cache, vd = flashattn.quantize_fp8(torch.randn((batch, capacity, heads_k, d), generator=g))
    k_new = (torch.randn((batch, 2, heads_k, d), generator=g) / kd[:, None, :, None]).clamp(-448, 448).to(FP8)
    v_new = (torch.randn((batch, 2, heads_k, d), generator=g) / vd[:, None, :, None]).clamp(-448, 448).to(FP8)
    lens = torch.tensor([5, 17], dtype=torch.int32)
    out = fa3.flash_attn_with_kvcache(q8, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, q_descale=qd,
                                      k_descale=kd, v_descale=vd)
    assert out.dtype == torch.bfloat16
    for b in range(batch):
        end = int(lens[b]) + 2
        assert torch.equal(k_cache[b, lens[b]:end].view(torch.uint8), k_new[b].view(torch.uint8))
        ref, _, _ = reference.attention_reference(
            dequantised(q8[b:b + 1], qd[b:b + 1], 2).numpy(), dequantised(k_cache[b:b + 1, :end], kd[b:b + 1]).numpy(),
            dequantised(v_cache[b:b + 1, :end], vd[b:b + 1]).numpy())
        assert_within_bf16(out[b:b + 1], ref)
    cos = torch.ones(capacity, 8).to(FP8)
    with pytest.raises(flashattn.ArgumentError, match="argument 'rotary_cos': must not be given with float8_e4m3fn"):
        fa3.flash_attn_with_kvcache(q8, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, rotary_cos=cos,
                                    rotary_sin=cos)


def test_compile_fullgraph():
    q8, k8, v8, qd, kd, vd = fp8_inputs()

    def call(q, k, v, qd, kd, vd):
        return fa3.flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)

    eager = call(q8, k8, v8, qd, kd, vd)
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True)(q8, k8, v8, qd, kd, vd)
    assert compiled.dtype == torch.bfloat16
    torch.testing.assert_close(compiled, eager, atol=0, rtol=0)


def test_opcheck_fp8_forward():
    # (test_schema runs arithmetic torch has no float8 kernels for on the CPU.)
    q8, k8, v8, qd, kd, vd = fp8_inputs(seqlen_q=9, seqlen_k=9, heads=2, heads_k=2, d=16)
    torch.library.opcheck(torch.ops.flashattn.fwd.default,
                          (q8, k8, v8, None, None, None, 0, 0, 0.25, True, -1, -1, 0.0, None, 0.0, 1, None, qd, kd,
                           vd), test_utils=("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"))


# ---------------------------------------------------------------------------------------------
# CUDA tensors: the FA3 fp8 forward (sm90). Skipped elsewhere.
# ---------------------------------------------------------------------------------------------
HAS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
needs_sm90 = pytest.mark.skipif(not HAS_SM90, reason="the fp8 kernels need an sm90 GPU (H100/H200)")


@needs_sm90
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fp8_against_bf16_attention_and_the_cpu_backend(head_dim, causal):
    """On the GPU the kernels round P to e4m3 too: against bf16 attention over the dequantised
    inputs, and against the CPU backend's fp8 result (which does not round P), the error is within
    10 % of what rounding P to e4m3 costs by itself (p_rounded_to_e4m3). That cost is about FA3's
    bound of 0.025 relative: 0.0255 at d64 on these inputs, which no kernel rounding P can meet."""
    g = torch.Generator().manual_seed(head_dim + causal)
    q, k, v = (torch.randn((2, 777, heads, head_dim), generator=g).bfloat16() for heads in (8, 2, 2))
    q8, qd = flashattn.quantize_fp8(q, heads_k=2)
    k8, kd = flashattn.quantize_fp8(k)
    v8, vd = flashattn.quantize_fp8(v)
    args = dict(causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
    out = fa3.flash_attn_func(*(x.cuda() for x in (q8, k8, v8)), **{n: (x.cuda() if torch.is_tensor(x) else x)
                                                                  for n, x in args.items()})
    assert out.dtype == torch.bfloat16 and out.is_cuda and torch.isfinite(out).all()
    ref = fa3.flash_attn_func(*(dequantised(x, d, grp).bfloat16().cuda() for x, d, grp in ((q8, qd, 4), (k8, kd, 1),
                                                                                         (v8, vd, 1))), causal=causal)
    cpu = fa3.flash_attn_func(q8, k8, v8, **args)
    model = p_rounded_to_e4m3(*(dequantised(x, d, grp) for x, d, grp in ((q8, qd, 4), (k8, kd, 1), (v8, vd, 1))),
                              causal=causal).bfloat16().float()
    for what, base in (("bf16 attention", ref.float().cpu()), ("cpu fp8", cpu.float())):
        relative = ((out.float().cpu() - base).norm() / base.norm()).item()
        model_relative = ((model - base).norm() / base.norm()).item()
        assert model_relative < 0.03, (what, model_relative)  # (the model itself is FA3's algorithm)
        assert relative < 1.1 * model_relative, (what, relative, model_relative)


@needs_sm90
def test_cuda_fp8_varlen_lse_and_the_errors_that_name_their_argument():
    g = torch.Generator().manual_seed(11)
    lens = [300, 1, 517]
    cu = torch.tensor([0, 300, 301, 818], dtype=torch.int32)
    total, heads, heads_k, d = 818, 4, 2, 128
    q8, qd = flashattn.quantize_fp8(torch.randn((total, heads, d), generator=g), heads_k=heads_k, cu_seqlens=cu)
    k8, kd = flashattn.quantize_fp8(torch.randn((total, heads_k, d), generator=g), cu_seqlens=cu)
    v8, vd = flashattn.quantize_fp8(torch.randn((total, heads_k, d), generator=g), cu_seqlens=cu)
    dev = [x.cuda() for x in (q8, k8, v8, cu, qd, kd, vd)]
    out, lse = fa3.flash_attn_varlen_func(dev[0], dev[1], dev[2], dev[3], dev[3], max(lens), max(lens), causal=True,
                                          q_descale=dev[4], k_descale=dev[5], v_descale=dev[6], return_attn_probs=True)
    cpu_out, cpu_lse = fa3.flash_attn_varlen_func(q8, k8, v8, cu, cu, max(lens), max(lens), causal=True, q_descale=qd,
                                                  k_descale=kd, v_descale=vd, return_attn_probs=True)
    relative = ((out.float().cpu() - cpu_out.float()).norm() / cpu_out.float().norm()).item()
    assert relative < 0.025, relative
    torch.testing.assert_close(lse.cpu(), cpu_lse, atol=0.05, rtol=0)
    # A KV cache in fp8 runs on the CPU backend only; said by name.
    cache = torch.zeros((2, 64, heads_k, d), dtype=torch.float32).to(FP8).cuda()
    with pytest.raises(flashattn.UnsupportedError, match="'q'.*KV cache"):
        fa3.flash_attn_with_kvcache(dev[0][:2, None], cache, cache, cache_seqlens=torch.tensor([5, 9], dtype=torch.int32,
                                                                                                  device="cuda"))
