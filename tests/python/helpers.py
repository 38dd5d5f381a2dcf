"""Shared by the Python tests: the tolerance rule and a numpy reference backward."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from flashattn import reference


def max_abs_diff(a: Any, b: Any) -> float:
    if hasattr(a, "detach"):
        a = a.detach().double().cpu().numpy()
    if hasattr(b, "detach"):
        b = b.detach().double().cpu().numpy()
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        diff = np.where(both_inf, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=np.inf).max())


def assert_within_rule(actual: Any, exact: Any, same_precision: Any, floor: float, what: str = "") -> None:
    """The library's tolerance rule: |actual - exact| <= 2 x |same_precision - exact| + floor, where
    exact is computed in high precision and same_precision is a naive computation in the inputs'
    own precision (how much the precision errs by itself). Never a loose constant."""
    err = max_abs_diff(actual, exact)
    base = max_abs_diff(same_precision, exact)
    assert err <= 2 * base + floor, f"{what}: error {err:.3g} > 2 x {base:.3g} (same-precision error) + {floor:g}"


def rounding_floor(dtype: Any, q: Any, k: Any, v: Any, softmax_scale: float, exact: Any) -> float:
    """The absolute floor of the rule, as in the C++ suite: one unit in the last place of the
    output's dtype at the output's magnitude; for float32 also the rounding of the largest logit,
    which exp turns into a relative error of every weight (FlashAttention evaluates exp2 of a
    float32 logit, the same-precision numpy reference exp of a differently rounded one)."""
    name = np.dtype(dtype).name
    out_max = max(1.0, float(np.max(np.abs(np.asarray(exact, dtype=np.float64))) if np.size(exact) else 0.0))
    if name == "float16":
        return 2.0 ** -11 * out_max
    if name == "bfloat16":
        return 2.0 ** -8 * out_max
    q64, k64 = (np.asarray(x, dtype=np.float64) for x in (q, k))
    logit_max = softmax_scale * float(np.abs(q64).max(initial=0) * np.abs(k64).max(initial=0)) * q64.shape[-1]
    logit_max = min(logit_max, softmax_scale * np.sqrt(float((q64 ** 2).sum(-1).max(initial=0)) *
                                                       float((k64 ** 2).sum(-1).max(initial=0))))
    v_max = max(1.0, float(np.abs(np.asarray(v, dtype=np.float64)).max(initial=0)))
    return 2.0 ** -22 * out_max + 4 * 2.0 ** -24 * max(1.0, logit_max) * v_max


def reference_grads(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, *, softmax_scale: float,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[np.ndarray] = None, dropout_p: float = 0.0,
                    dropout_keep: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dq, dk, dv of reference.attention_reference (dense, float64), derived by hand:
    P = softmax(L), A = P * keep / (1 - p), O = A V; dV = A^T dO, dP = (dO V^T) * keep / (1 - p),
    dL = P * (dP - rowsum(P * dP)), dS = dL * dL/dS (scale, or scale * (1 - tanh^2) with softcap),
    dQ = dS K, dK = dS^T Q, summed over the query heads that share a key head (GQA)."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    heads_q, heads_k = q.shape[2], k.shape[2]
    group = heads_q // heads_k
    kr, vr = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    _, _, probs = reference.attention_reference(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                                window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    keep_scale = np.ones_like(probs)
    if dropout_p > 0:
        keep_scale = np.asarray(dropout_keep, dtype=np.float64) / (1.0 - dropout_p)
    attn = probs * keep_scale
    dv = np.einsum("bhqk,bqhd->bkhd", attn, dout)
    dp = np.einsum("bqhd,bkhd->bhqk", dout, vr) * keep_scale
    dl = probs * (dp - (probs * dp).sum(-1, keepdims=True))
    scores = np.einsum("bqhd,bkhd->bhqk", q, kr)
    if softcap > 0:
        t = np.tanh(scores * softmax_scale / softcap)
        ds = dl * softmax_scale * (1 - t * t)
    else:
        ds = dl * softmax_scale
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kr)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    b, sk, _, d = k.shape
    dk = dk.reshape(b, sk, heads_k, group, d).sum(3)
    dv = dv.reshape(b, sk, heads_k, group, v.shape[-1]).sum(3)
    return dq, dk, dv
