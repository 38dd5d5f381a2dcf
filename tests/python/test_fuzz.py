"""Fuzzing the Python layer: random valid calls of the flash_attn interface on numpy arrays (and on
torch tensors when torch is installed) against the numpy reference, and random invalid calls that
must raise the package's errors (FlashAttnError subclasses: TypeError or ValueError, catchable as
RuntimeError) naming an argument, never crash.

Case i runs seed FLASHATTN_FUZZ_SEED + i (default 1); FLASHATTN_FUZZ_CASES sets the number of
cases of each test. A failing case shows its seed in the test id: rerun it alone with
FLASHATTN_FUZZ_SEED=<seed> FLASHATTN_FUZZ_CASES=1.
"""
from __future__ import annotations

import math
import os
import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

import flashattn
from flashattn import (
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
    numpy_api,
    reference,
)
from flashattn.rotary import apply_rotary_emb
from helpers import assert_within_rule, max_abs_diff, reference_grads, rounding_floor

try:
    import torch
except ImportError:  # the numpy cases run everywhere; the torch ones where torch is installed
    torch = None

FIRST_SEED = int(os.environ.get("FLASHATTN_FUZZ_SEED", "1"), 0)
CASES = int(os.environ.get("FLASHATTN_FUZZ_CASES", "0"), 0)


def seeds(default: int) -> List[int]:
    return [FIRST_SEED + i for i in range(CASES or default)]


FRAMEWORKS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]


def to_framework(x: Any, framework: str) -> Any:
    if framework == "torch" and isinstance(x, np.ndarray):
        return torch.from_numpy(x.copy())
    return x


def to_numpy(x: Any) -> Any:
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else x


# ---------------------------------------------------------------------------------------------
# Drawing valid calls
# ---------------------------------------------------------------------------------------------
def draw_length(r: random.Random) -> int:
    kind = r.random()
    if kind < 0.08:
        return 0
    if kind < 0.2:
        return 1
    return r.randint(2, 17) if kind < 0.7 else r.randint(18, 48)


def draw_head_dim(r: random.Random) -> int:
    """Any size up to 256: the Python layer pads those that are not multiples of 8."""
    return r.choice([r.randint(1, 256), 8 * r.randint(1, 32), r.choice([1, 3, 6, 63, 65, 100, 129, 256])])


def draw_window(r: random.Random) -> int:
    return r.choice([-1, -1, 0, r.randint(1, 20), r.randint(1, 20), 2**31 - 1])


def draw_options(r: random.Random, batch: int, heads_q: int, rng: np.random.Generator) -> Dict[str, Any]:
    options: Dict[str, Any] = {}
    if r.random() < 0.3:
        options["causal"] = True
    if r.random() < 0.3:
        options["window_size"] = (draw_window(r), draw_window(r))
    if r.random() < 0.15:
        options["softcap"] = r.choice([0.5, 2.0, 30.0])
    if r.random() < 0.15:
        shape = (heads_q,) if r.random() < 0.5 else (batch, heads_q)
        options["alibi_slopes"] = rng.uniform(0.05, 0.5, shape).astype(np.float32)
    if r.random() < 0.25:
        options["softmax_scale"] = r.choice([0.0, -0.2, 0.05, 0.3, 1.0])
    return options


def qkv(rng: np.random.Generator, dtype: Any, shape_q: Tuple[int, ...], shape_k: Tuple[int, ...],
        head_dim_v: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape_v = shape_k[:-1] + (head_dim_v,)
    return tuple(rng.standard_normal(s).astype(dtype) for s in (shape_q, shape_k, shape_v))  # type: ignore


def strided(x: np.ndarray, r: random.Random) -> np.ndarray:
    """x itself or, at random, the same values in a view with gaps between rows (padded head
    dims, every other row of a longer array): the library takes any outer strides."""
    kind = r.random()
    if kind < 0.6 or x.ndim < 2:
        return x
    if kind < 0.8:
        big = np.zeros(x.shape[:-1] + (x.shape[-1] + r.choice([1, 8, 13]),), dtype=x.dtype)
        big[..., :x.shape[-1]] = x
        return big[..., :x.shape[-1]]
    big = np.zeros((2 * x.shape[0],) + x.shape[1:], dtype=x.dtype)
    big[::2] = x
    return big[::2]


def check_forward(out: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, exact: np.ndarray, low: np.ndarray,
                  scale: float, what: str) -> None:
    out = to_numpy(out)
    assert out.shape == exact.shape and out.dtype == q.dtype, what
    assert_within_rule(out, exact, low, rounding_floor(q.dtype, q, k, v, abs(scale), exact), what)


# ---------------------------------------------------------------------------------------------
# Valid calls against the reference
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("seed", seeds(100))
def test_valid_dense_forward(seed: int, framework: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    batch = r.choice([0, 1, 1, 2, 3])
    hk = r.randint(1, 3)
    hq = hk * r.choice([1, 1, 2, 4])
    d = draw_head_dim(r)
    dv = d if r.random() < 0.6 else draw_head_dim(r)
    dtype = r.choice([np.float32, np.float16])
    sq, sk = draw_length(r), draw_length(r)
    q, k, v = qkv(rng, dtype, (batch, sq, hq, d), (batch, sk, hk, d), dv)
    options = draw_options(r, batch, hq, rng)
    dropout_p = r.choice([0.0, 0.0, 0.0, 0.2, 0.7])
    out, lse, s_dmask = flash_attn_func(*(to_framework(strided(x, r), framework) for x in (q, k, v)),
                                        dropout_p=dropout_p,
                                        return_attn_probs=True,
                                        **{key: to_framework(x, framework) for key, x in options.items()})
    keep = None
    if dropout_p > 0:  # S_dmask encodes the mask: negative where a weight was dropped
        keep = to_numpy(s_dmask)[:, :, :sq, :sk] >= 0
    exact, exact_lse, _ = reference.attention_reference(*(x.astype(np.float64) for x in (q, k, v)),
                                                        dropout_p=dropout_p, dropout_keep=keep, **options)
    low, _, _ = reference.attention_reference(q, k, v, dropout_p=dropout_p, dropout_keep=keep, **options)
    scale = options.get("softmax_scale", d ** -0.5)
    check_forward(out, q, k, v / (1 - dropout_p), exact, low, scale, "out")
    np.testing.assert_allclose(to_numpy(lse), exact_lse, atol=1e-4 * max(1.0, float(np.abs(exact_lse[
        np.isfinite(exact_lse)]).max(initial=0))))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("seed", seeds(60))
def test_valid_varlen_forward(seed: int, framework: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    batch = r.choice([0, 1, 2, 3, 4])
    lens_q = [draw_length(r) for _ in range(batch)]
    lens_k = [draw_length(r) for _ in range(batch)]
    hk = r.randint(1, 3)
    hq = hk * r.choice([1, 2, 3])
    d = draw_head_dim(r)
    dtype = r.choice([np.float32, np.float16])
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = qkv(rng, dtype, (int(cu_q[-1]), hq, d), (int(cu_k[-1]), hk, d), d)
    options = draw_options(r, batch, hq, rng)
    seqused = None
    if batch and r.random() < 0.3:
        seqused = np.array([r.randint(0, n) for n in lens_k], dtype=np.int32)
    out = flash_attn_varlen_func(*(to_framework(strided(x, r), framework) for x in (q, k, v)),
                                 *(to_framework(x, framework) for x in (cu_q, cu_k)),
                                 max(lens_q, default=0), max(lens_k, default=0),
                                 seqused_k=to_framework(seqused, framework),
                                 **{key: to_framework(x, framework) for key, x in options.items()})
    exact, _ = reference.varlen_attention_reference(*(x.astype(np.float64) for x in (q, k, v)), cu_q, cu_k,
                                                    seqused_k=seqused, **options)
    low, _ = reference.varlen_attention_reference(q, k, v, cu_q, cu_k, seqused_k=seqused, **options)
    check_forward(out, q, k, v, exact, low, options.get("softmax_scale", d ** -0.5), "varlen out")


@pytest.mark.parametrize("seed", seeds(60))
def test_valid_backward(seed: int) -> None:
    """numpy_api.bwd (the low-level API: head dims multiples of 8) against hand-derived float64
    gradients; float32 with well-conditioned scales (sharp softmaxes and cancellations are the C++
    fuzz's, with the same-precision reference)."""
    r, rng = random.Random(seed), np.random.default_rng(seed)
    batch, hk = r.randint(1, 2), r.randint(1, 2)
    hq = hk * r.choice([1, 2])
    d, dv = 8 * r.randint(1, 16), 8 * r.randint(1, 16)
    sq, sk = r.randint(1, 24), r.randint(1, 24)
    q, k, v = qkv(rng, np.float32, (batch, sq, hq, d), (batch, sk, hk, d), dv)
    dout = rng.standard_normal((batch, sq, hq, dv)).astype(np.float32)
    options = draw_options(r, batch, hq, rng)
    options["softmax_scale"] = r.uniform(0.02, 1.0) * d ** -0.5
    if "softcap" in options:
        options["softcap"] = max(options["softcap"], 2.0)
    options["dropout_p"] = r.choice([0.0, 0.0, 0.3])
    deterministic = r.random() < 0.5
    out, lse, rng_state = numpy_api.fwd(q, k, v, **options)
    grads = numpy_api.bwd(dout, q, k, v, out, lse, rng_state=rng_state, deterministic=deterministic, **options)
    keep = None
    if options["dropout_p"] > 0:
        keep = numpy_api.dropout_mask(batch, hq, sq, sk, options["dropout_p"], *rng_state).astype(bool)
    exact = reference_grads(q, k, v, dout, dropout_keep=keep, **options)
    for name, got, want in zip(("dq", "dk", "dv"), grads, exact):
        assert got.shape == want.shape and got.dtype == np.float32, name
        # float32 against float64: a few units at the gradient's magnitude.
        assert max_abs_diff(got, want) <= 2e-5 * max(1.0, float(np.abs(want).max())), name


def rotate_q(q: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, lens: np.ndarray,
             per_row: bool) -> np.ndarray:
    """q at positions lens[b] + i (causal or windowed calls), else every row at lens[b]."""
    if per_row:
        return apply_rotary_emb(q, cos, sin, interleaved=interleaved, seqlen_offsets=lens)
    rows = [apply_rotary_emb(q[:, i:i + 1], cos, sin, interleaved=interleaved, seqlen_offsets=lens)
            for i in range(q.shape[1])]
    return np.concatenate(rows, axis=1) if rows else q


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("seed", seeds(50))
def test_valid_kvcache(seed: int, framework: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    batch, hk = r.randint(1, 3), r.randint(1, 2)
    hq = hk * r.choice([1, 2])
    d = draw_head_dim(r)
    dv = d if r.random() < 0.7 else draw_head_dim(r)
    capacity = r.randint(1, 40)
    seqlen_new = r.choice([0, 0, 1, min(3, capacity)])
    seqlen_q = r.choice([1, 1, 2, 4])
    lens = np.array([r.randint(0, capacity - seqlen_new) for _ in range(batch)], dtype=np.int32)
    dtype = r.choice([np.float32, np.float16])
    q = rng.standard_normal((batch, seqlen_q, hq, d)).astype(dtype)
    k_logical = rng.standard_normal((batch, capacity, hk, d)).astype(dtype)
    v_logical = rng.standard_normal((batch, capacity, hk, dv)).astype(dtype)
    kwargs: Dict[str, Any] = {}
    layout = r.choice(["dense", "batch_idx", "paged"])
    if layout == "dense":
        k_cache, v_cache = k_logical.copy(), v_logical.copy()
    elif layout == "batch_idx":
        rows = np.array(r.sample(range(batch + 2), batch), dtype=np.int32)
        k_cache = rng.standard_normal((batch + 2, capacity, hk, d)).astype(dtype)
        v_cache = rng.standard_normal((batch + 2, capacity, hk, dv)).astype(dtype)
        k_cache[rows], v_cache[rows] = k_logical, v_logical
        kwargs["cache_batch_idx"] = rows
    else:
        page = r.choice([1, 2, 3, 8, 16])
        pages = -(-capacity // page)
        table = np.array(r.sample(range(batch * pages + 2), batch * pages), dtype=np.int32).reshape(batch, pages)
        k_cache = rng.standard_normal((batch * pages + 2, page, hk, d)).astype(dtype)
        v_cache = rng.standard_normal((batch * pages + 2, page, hk, dv)).astype(dtype)
        for b in range(batch):
            for j in range(pages):
                n = min(page, capacity - j * page)
                k_cache[table[b, j], :n] = k_logical[b, j * page:j * page + n]
                v_cache[table[b, j], :n] = v_logical[b, j * page:j * page + n]
        kwargs["block_table"] = table
    options = draw_options(r, batch, hq, rng)
    options.pop("alibi_slopes", None) if r.random() < 0.5 else None
    interleaved = r.random() < 0.5
    cos = sin = None
    if r.random() < 0.4:
        rotary_dim = 2 * r.randint(1, d // 2) if d >= 2 else 0
        if rotary_dim:
            angles = rng.uniform(0, 2 * np.pi, (capacity + seqlen_q, rotary_dim // 2))
            cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
            kwargs.update(rotary_cos=cos, rotary_sin=sin)
    k_new = v_new = None
    if seqlen_new:
        k_new = rng.standard_normal((batch, seqlen_new, hk, d)).astype(dtype)
        v_new = rng.standard_normal((batch, seqlen_new, hk, dv)).astype(dtype)
    k_cache_f, v_cache_f = (to_framework(strided(x, r), framework) for x in (k_cache, v_cache))
    out = flash_attn_with_kvcache(
        to_framework(strided(q, r), framework), k_cache_f, v_cache_f, to_framework(k_new, framework),
        to_framework(v_new, framework), cache_seqlens=to_framework(lens, framework),
        rotary_interleaved=interleaved, num_splits=r.choice([0, 1, 3]),
        **{key: to_framework(x, framework) for key, x in {**kwargs, **options}.items()})
    out = to_numpy(out)
    per_row = options.get("causal", False) or any(w >= 0 for w in options.get("window_size", (-1, -1)))
    q_rot, k_rot = q, k_new
    if cos is not None:
        q_rot = rotate_q(q, cos, sin, interleaved, lens, per_row)
        if k_new is not None:
            k_rot = apply_rotary_emb(k_new, cos, sin, interleaved=interleaved, seqlen_offsets=lens)
    alibi = options.pop("alibi_slopes", None)
    scale = options.get("softmax_scale", d ** -0.5)
    for b in range(batch):
        n = int(lens[b])
        if k_new is not None:
            k_logical[b, n:n + seqlen_new], v_logical[b, n:n + seqlen_new] = k_rot[b], v_new[b]
        total = n + seqlen_new
        slopes = alibi if alibi is None or alibi.ndim == 1 else alibi[b]
        args = (q_rot[b:b + 1], k_logical[b:b + 1, :total], v_logical[b:b + 1, :total])
        exact, _, _ = reference.attention_reference(*(x.astype(np.float64) for x in args), alibi_slopes=slopes,
                                                    **options)
        low, _, _ = reference.attention_reference(*args, alibi_slopes=slopes, **options)
        # (q and k were rotated in the input dtype on both sides: the same rounding)
        check_forward(out[b:b + 1], q, k_logical, v_logical, exact, low, scale, f"sequence {b}")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("seed", seeds(30))
def test_valid_combine(seed: int, framework: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    splits, heads, d = r.randint(1, 6), r.randint(1, 3), draw_head_dim(r)
    shape = (r.randint(0, 3), r.randint(0, 9)) if r.random() < 0.7 else (r.randint(0, 20),)
    out_partial = rng.standard_normal((splits,) + shape + (heads, d)).astype(np.float32)
    lse_partial = rng.uniform(-5, 20, (splits,) + shape + (heads,)).astype(np.float32)
    lse_partial[rng.random(lse_partial.shape) < 0.3] = -np.inf  # empty splits
    out_dtype = r.choice([None, np.float16])
    if framework == "torch" and out_dtype is not None:
        out_dtype = torch.float16
    out, lse = flash_attn_combine(to_framework(out_partial, framework), to_framework(lse_partial, framework),
                                  out_dtype=out_dtype)
    top = lse_partial.max(axis=0)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(lse_partial.astype(np.float64) - safe_top)
    total = weights.sum(axis=0)
    expect_lse = np.where(total > 0, np.log(np.where(total > 0, total, 1)) + safe_top, -np.inf)
    expect = (weights[..., None] * out_partial).sum(axis=0) / np.where(total > 0, total, 1)[..., None]
    out, lse = to_numpy(out), to_numpy(lse)
    assert out.shape == expect.shape and lse.shape == expect_lse.shape
    tolerance = 2.0 ** -10 if out_dtype is not None else 1e-5
    assert max_abs_diff(out, expect) <= tolerance * max(1.0, float(np.abs(expect).max(initial=0)))
    assert max_abs_diff(lse, expect_lse) <= 1e-5 * 30


# ---------------------------------------------------------------------------------------------
# Invalid calls: the package's errors, naming an argument
# ---------------------------------------------------------------------------------------------
def expect_refused(call: Callable[[], Any], allowed: Tuple[str, ...], what: str) -> None:
    with pytest.raises(flashattn.FlashAttnError) as info:
        call()
    error = info.value
    assert isinstance(error, RuntimeError) and isinstance(error, (TypeError, ValueError)), what
    assert error.argument in allowed, f"{what}: names '{error.argument}', expected one of {allowed}: {error}"
    assert f"argument '{error.argument}'" in str(error), f"{what}: {error}"


class Call:
    """A valid call as (function, positional arguments, keyword arguments) that a mutation edits."""

    def __init__(self, function: Callable[..., Any], names: List[str], args: List[Any], kwargs: Dict[str, Any]):
        self.function, self.names, self.args, self.kwargs = function, names, list(args), dict(kwargs)

    def get(self, name: str) -> Any:
        return self.args[self.names.index(name)] if name in self.names else self.kwargs.get(name)

    def set(self, name: str, value: Any) -> None:
        if name in self.names:
            self.args[self.names.index(name)] = value
        else:
            self.kwargs[name] = value

    def __call__(self) -> Any:
        return self.function(*self.args, **self.kwargs)


Mutation = Tuple[str, Tuple[str, ...]]  # (what was broken, the arguments the error may name)


class Spec:
    """What breaks a tensor argument: growing one of `axes` (the others are free: the package
    allocates the outputs), leaving it out (`required`), a dtype outside `dtypes`. `peers` are
    the arguments its sizes are checked against, which the error may name instead."""

    def __init__(self, peers: Tuple[str, ...], axes: Tuple[int, ...], required: bool = True, index: bool = False,
                 scalar_ok: bool = False):
        self.peers, self.axes, self.required, self.index = peers, axes, required, index
        self.scalar_ok = scalar_ok  # an int stands for the whole tensor (cache_seqlens)


WRONG_FLOAT_DTYPES = [np.int32, np.uint8, np.bool_, np.complex64, np.int8]
WRONG_INDEX_DTYPES = [np.float32, np.uint8, np.bool_, np.int8, np.int16]


def break_tensor(r: random.Random, call: Call, name: str, spec: Spec) -> Optional[Mutation]:
    x = call.get(name)
    if x is None:
        return None
    kind = r.randint(0, 6)
    if kind == 0:
        call.set(name, x.astype(r.choice(WRONG_INDEX_DTYPES if spec.index else WRONG_FLOAT_DTYPES)))
        return f"dtype of {name}", (name,)
    if kind == 1:  # two dims more (past the library's 5 for the 4-d ones), or a scalar
        call.set(name, x[None, None] if spec.scalar_ok or r.random() < 0.5 else x.reshape(-1)[0])
        return f"ndim of {name}", (name,) + spec.peers
    if kind == 2:
        if x.size == 0 or not spec.axes:
            return None
        axis = r.choice(spec.axes)
        call.set(name, np.concatenate([x, x.take([0], axis=axis)], axis=axis))
        return f"dim {axis} of {name} one longer", (name,) + spec.peers
    if kind == 3:
        call.set(name, x.tolist())
        return f"{name} as a list", (name,)
    if kind == 4:
        if not spec.required:
            return None
        call.set(name, None)
        return f"{name} left out", (name,) + spec.peers
    if kind == 5:
        call.set(name, np.array(x, dtype=object))
        return f"{name} of dtype object", (name,)
    call.set(name, str(x.shape))
    return f"{name} as a string", (name,)


OPTION_VALUES: Dict[str, List[Any]] = {
    "window_size": [(-2, 0), (0, -5), (1,), (1, 2, 3), "left", (0.5, 1), (None, 0), (2**31, 0)],
    "softcap": [-1.0, math.nan, math.inf, "2", None],
    "softmax_scale": [math.nan, math.inf, -math.inf, "1"],
    "dropout_p": [-0.1, 1.0, 1.5, math.nan, None],
    "causal": [None],
    "num_splits": [-1, 257, 1.5, None, 2**40],
}
OPTIONS = {
    "dense": ["window_size", "softcap", "softmax_scale", "dropout_p", "causal"],
    "varlen": ["window_size", "softcap", "softmax_scale", "dropout_p", "causal", "num_splits"],
    "kvcache": ["window_size", "softcap", "softmax_scale", "causal", "num_splits"],
    "combine": [],
}


def break_option(r: random.Random, call: Call, entry: str) -> Optional[Mutation]:
    if not OPTIONS[entry]:
        return None
    name = r.choice(OPTIONS[entry])
    call.set(name, r.choice(OPTION_VALUES[name]))
    return f"{name} out of range or of the wrong type", (name,)


def valid_dense(r: random.Random, rng: np.random.Generator) -> Call:
    batch, hk = r.randint(1, 2), r.randint(1, 2)
    hq = hk * r.choice([1, 2])
    d, sq, sk = r.choice([8, 16, 20, 64]), r.randint(1, 6), r.randint(1, 6)
    q, k, v = qkv(rng, np.float32, (batch, sq, hq, d), (batch, sk, hk, d), d)
    kwargs: Dict[str, Any] = {}
    if r.random() < 0.5:
        kwargs["alibi_slopes"] = rng.uniform(0.1, 0.5, (hq,)).astype(np.float32)
    return Call(flash_attn_func, ["q", "k", "v"], [q, k, v], kwargs)


def valid_varlen(r: random.Random, rng: np.random.Generator) -> Call:
    lens_q = [r.randint(1, 5) for _ in range(r.randint(1, 3))]
    lens_k = [r.randint(1, 5) for _ in lens_q]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = qkv(rng, np.float32, (int(cu_q[-1]), 2, 16), (int(cu_k[-1]), 2, 16), 16)
    return Call(flash_attn_varlen_func, ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"],
                [q, k, v, cu_q, cu_k, max(lens_q), max(lens_k)], {})


def valid_kvcache(r: random.Random, rng: np.random.Generator) -> Call:
    batch, capacity, d = r.randint(1, 3), 8, 16
    q = rng.standard_normal((batch, 1, 2, d)).astype(np.float32)
    kwargs: Dict[str, Any] = {"cache_seqlens": np.array([r.randint(0, capacity - 1) for _ in range(batch)], np.int32)}
    if r.random() < 0.5:
        pages = 4
        kwargs["block_table"] = np.arange(batch * pages, dtype=np.int32).reshape(batch, pages)
        k_cache = rng.standard_normal((batch * pages, 2, 2, d)).astype(np.float32)
    else:
        k_cache = rng.standard_normal((batch, capacity, 2, d)).astype(np.float32)
    v_cache = k_cache.copy()
    names = ["q", "k_cache", "v_cache", "k", "v"]
    args = [q, k_cache, v_cache, rng.standard_normal((batch, 1, 2, d)).astype(np.float32),
            rng.standard_normal((batch, 1, 2, d)).astype(np.float32)]
    if r.random() < 0.5:
        angles = rng.uniform(0, 6, (capacity + 1, 4))
        kwargs.update(rotary_cos=np.cos(angles).astype(np.float32), rotary_sin=np.sin(angles).astype(np.float32))
    return Call(flash_attn_with_kvcache, names, args, kwargs)


def valid_combine(r: random.Random, rng: np.random.Generator) -> Call:
    splits, batch, seqlen, heads, d = r.randint(1, 3), r.randint(1, 2), r.randint(1, 4), 2, 16
    out_partial = rng.standard_normal((splits, batch, seqlen, heads, d)).astype(np.float32)
    lse_partial = rng.standard_normal((splits, batch, seqlen, heads)).astype(np.float32)
    return Call(flash_attn_combine, ["out_partial", "lse_partial"], [out_partial, lse_partial], {})


def break_contents(r: random.Random, call: Call) -> Optional[Mutation]:
    """Index tensors the library reads on the host: offsets, lengths, pages."""
    if call.function is flash_attn_varlen_func:
        name = r.choice(["cu_seqlens_q", "cu_seqlens_k"])
        cu = call.get(name).copy()
        if len(cu) > 2 and r.random() < 0.5:
            cu[1], cu[2] = cu[2], cu[1] - 1  # decreasing
        else:
            cu[-1] += r.choice([1, 100])  # past the rows
        call.set(name, cu)
        return f"{name} not offsets into the rows", (name,)
    if call.function is flash_attn_with_kvcache:
        if "block_table" in call.kwargs and r.random() < 0.5:
            table = call.kwargs["block_table"].copy()
            table[0, 0] = r.choice([-1, 1000])
            call.kwargs["block_table"] = table
            return "a block table entry outside the pages", ("block_table",)
        lens = call.kwargs["cache_seqlens"].copy()
        lens[0] = r.choice([-1, 100])
        call.kwargs["cache_seqlens"] = lens
        return "cache_seqlens outside the cache", ("cache_seqlens",)
    return None


BUILDERS: Dict[str, Tuple[Callable[[random.Random, np.random.Generator], Call], Dict[str, Spec]]] = {
    "dense": (valid_dense, {"q": Spec(("k", "v"), (0, 3)), "k": Spec(("v", "q"), (0, 1, 2, 3)),
                            "v": Spec(("q", "k"), (0, 1, 2)), "alibi_slopes": Spec((), (0,), required=False)}),
    "varlen": (valid_varlen, {"q": Spec(("k", "v"), (2,)), "k": Spec(("v", "q"), (0, 1, 2)),
                              "v": Spec(("q", "k"), (0, 1)),
                              "cu_seqlens_q": Spec(("cu_seqlens_k",), (0,), index=True),
                              "cu_seqlens_k": Spec(("cu_seqlens_q",), (0,), index=True)}),
    "kvcache": (valid_kvcache, {"q": Spec(("k_cache", "v_cache", "k", "v", "cache_seqlens", "block_table",
                                           "rotary_cos"), (0, 3)),
                                "k_cache": Spec(("v_cache", "k", "block_table", "cache_seqlens", "q"), (0, 1, 2, 3)),
                                "v_cache": Spec(("k_cache", "v"), (0, 1, 2, 3)),
                                "k": Spec(("v", "q", "k_cache", "cache_seqlens", "block_table", "rotary_cos"),
                                          (0, 1, 2, 3)),
                                "v": Spec(("k", "v_cache"), (0, 1, 2, 3)),
                                "cache_seqlens": Spec(("k",), (0,), index=True, scalar_ok=True),
                                "block_table": Spec(("k_cache",), (0,), required=False, index=True),
                                "rotary_cos": Spec(("rotary_sin",), (0, 1)),
                                "rotary_sin": Spec(("rotary_cos",), (0, 1))}),
    "combine": (valid_combine, {"out_partial": Spec(("lse_partial",), (0, 1, 2, 3)),
                                "lse_partial": Spec(("out_partial",), (0, 1, 2, 3))}),
}


def framework_value(x: Any, framework: str) -> Any:
    """x as the framework's tensor when it is a numeric array (the rest is passed as it is)."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "biufc" and x.ndim > 0:
        return to_framework(x, framework)
    return x


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("entry", list(BUILDERS))
@pytest.mark.parametrize("seed", seeds(75))
def test_invalid_calls_raise_the_package_errors(seed: int, entry: str, framework: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    build, specs = BUILDERS[entry]
    call = build(r, rng)
    call()  # the unbroken call runs (appending into the cache leaves it valid: lengths stay below capacity)
    mutation: Optional[Mutation] = None
    while mutation is None:
        kind = r.random()
        if kind < 0.6:
            name = r.choice(list(specs))
            mutation = break_tensor(r, call, name, specs[name])
        elif kind < 0.8:
            mutation = break_option(r, call, entry)
        else:
            mutation = break_contents(r, call)
    what, allowed = mutation
    if framework == "torch":
        call.args = [framework_value(x, framework) for x in call.args]
        call.kwargs = {key: framework_value(x, framework) for key, x in call.kwargs.items()}
    expect_refused(call, allowed, what)
