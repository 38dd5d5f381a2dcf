"""Padding helpers with the names and behaviour of ``flash_attn.bert_padding``, as Hugging Face
Transformers uses them: turn a padded batch (batch, seqlen, ...) with a 0/1 attention mask into the
packed varlen layout (total, ...) plus cu_seqlens, and back. Written for torch tensors (autograd
flows through them) and also usable with numpy arrays."""
from __future__ import annotations

from typing import Any, Optional, Tuple

Array = Any


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def index_first_axis(input: Array, indices: Array) -> Array:
    """input[indices] along the first axis: (first, *rest) -> (len(indices), *rest)."""
    return input[indices]


def index_put_first_axis(values: Array, indices: Array, first_axis_dim: int) -> Array:
    """A zero array of (first_axis_dim, *values.shape[1:]) with values written at rows indices."""
    if _is_torch(values):
        import torch

        output = torch.zeros((first_axis_dim, *values.shape[1:]), dtype=values.dtype, device=values.device)
        return output.index_put((indices,), values)  # out of place: differentiable in values
    import numpy as np

    output = np.zeros((first_axis_dim, *values.shape[1:]), dtype=values.dtype)
    output[indices] = values
    return output


def unpad_input(hidden_states: Array, attention_mask: Array,
                unused_mask: Optional[Array] = None) -> Tuple[Array, Array, Array, int, Array]:
    """hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen), 1 = a real token.

    Returns (packed (total, ...), indices (total,) into the flattened (batch*seqlen) rows,
    cu_seqlens int32 (batch + 1), max_seqlen_in_batch (int), seqused int32 (batch)): the five values
    of flash_attn >= 2.7. With unused_mask (tokens allocated but not attended to), those tokens are
    kept in the packed rows and cu_seqlens, and seqused counts the attention_mask tokens only."""
    batch, seqlen = attention_mask.shape[:2]
    rest = tuple(hidden_states.shape[2:])
    if _is_torch(attention_mask):
        import torch
        import torch.nn.functional as F

        all_masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
        seqlens = all_masks.sum(dim=-1, dtype=torch.int32)
        used_seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
        max_seqlen = int(seqlens.max().item()) if batch > 0 else 0
        cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
        packed = index_first_axis(hidden_states.reshape(batch * seqlen, *rest), indices)
        return packed, indices, cu_seqlens, max_seqlen, used_seqlens
    import numpy as np

    mask = np.asarray(attention_mask)
    all_masks = mask + np.asarray(unused_mask) if unused_mask is not None else mask
    seqlens = all_masks.sum(axis=-1).astype(np.int32)
    used_seqlens = mask.sum(axis=-1).astype(np.int32)
    indices = np.flatnonzero(all_masks.reshape(-1))
    max_seqlen = int(seqlens.max()) if batch > 0 else 0
    cu_seqlens = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    packed = index_first_axis(np.asarray(hidden_states).reshape(batch * seqlen, *rest), indices)
    return packed, indices, cu_seqlens, max_seqlen, used_seqlens


def pad_input(hidden_states: Array, indices: Array, batch: int, seqlen: int) -> Array:
    """The inverse of unpad_input: packed (total, ...) -> (batch, seqlen, ...), zeros at padding."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *output.shape[1:])
