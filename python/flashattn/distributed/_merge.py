"""Merging partial attention results by their log-sum-exp, in float32, with the library's combine
semantics (src/cpu/combine.cpp): out = sum_i w_i out_i with w_i = exp(lse_i - m) / sum_j
exp(lse_j - m), m = max_i lse_i, lse = m + log(sum_j exp(lse_j - m)). A partial with lse -inf
weighs nothing; a row no partial saw keeps out 0 and lse -inf (never NaN); NaN propagates."""
from __future__ import annotations

import torch
from torch import Tensor

_NEG_INF = float("-inf")


def _per_row(weight: Tensor) -> Tensor:
    """lse layout (batch, heads, rows) or (heads, rows) -> out layout (..., rows, heads, 1)."""
    return weight.movedim(-2, -1).unsqueeze(-1)


def merge_(acc_out: Tensor, acc_lse: Tensor, part_out: Tensor, part_lse: Tensor) -> None:
    """acc := merge(acc, part), in place. acc_out float32 (batch, rows, heads, d) or
    (rows, heads, d); acc_lse float32 (batch, heads, rows) or (heads, rows); part alike (part_out
    in any float dtype)."""
    peak = torch.maximum(acc_lse, part_lse)
    peak = torch.where(peak == _NEG_INF, torch.zeros_like(peak), peak)  # exp(-inf - 0) = 0
    w_acc = torch.exp(acc_lse - peak)
    w_part = torch.exp(part_lse - peak)
    total = w_acc + w_part
    seen = total > 0
    total = torch.where(seen, total, torch.ones_like(total))
    acc_lse.copy_(torch.where(seen, peak + torch.log(total), torch.full_like(total, _NEG_INF)))
    # Two passes over the rows (18 bytes per element): the merge's whole cost, see docs/PERF.md.
    acc_out.mul_(_per_row(w_acc / total)).addcmul_(part_out, _per_row(w_part / total))
