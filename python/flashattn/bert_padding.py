"""Padding helpers with the names and behaviour of ``flash_attn.bert_padding``, as Hugging Face
Transformers uses them: turn a padded batch (batch, seqlen, ...) with a 0/1 attention mask into the
packed varlen layout (total, ...) plus cu_seqlens, and back. Written for torch tensors (autograd
flows through them) and also usable with numpy arrays."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _args

Array = Any


def _is_torch(x: Any) -> bool:
    return _args.array_kind(x) == "torch"


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
    _args.first_tensor(hidden_states, "hidden_states")
    _args.tensor(attention_mask, "attention_mask", _args.array_kind(hidden_states))
    _args.tensor(unused_mask, "unused_mask", _args.array_kind(hidden_states), optional=True)
    _args.ndim(attention_mask, "attention_mask", 2, "(batch, seqlen)")
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


def unpad_input_for_concatenated_sequences(hidden_states: Array,
                                           attention_mask_in_length: Array) -> Tuple[Array, Array, Array, int]:
    """unpad_input for rows that each hold several short samples one after another (packed
    fine-tuning data): attention_mask_in_length (batch, seqlen) lists the lengths of the samples of
    each row, left-aligned and followed by zeros; e.g. the row [2, 3, 0, 0, 0, 0] holds a sample of
    2 tokens, then one of 3, then one padding token. Each sample becomes a sequence of its own.

    Arguments:
        hidden_states: (batch, seqlen, ...).
        attention_mask_in_length: int (batch, seqlen), sample lengths then zeros; each row's sum is
            the number of real tokens at the start of that row.

    Returns:
        (packed (total, ...), indices (total,) into the flattened (batch * seqlen) rows,
        cu_seqlens int32 (number of samples + 1,), max_seqlen_in_batch (int)): the four values of
        flash_attn's function, ready for flash_attn_varlen_func.
    """
    _args.first_tensor(hidden_states, "hidden_states")
    _args.tensor(attention_mask_in_length, "attention_mask_in_length", _args.array_kind(hidden_states))
    _args.ndim(attention_mask_in_length, "attention_mask_in_length", 2, "(batch, seqlen)")
    batch, seqlen = attention_mask_in_length.shape
    rest = tuple(hidden_states.shape[2:])
    if _is_torch(attention_mask_in_length):
        import torch
        import torch.nn.functional as F

        lengths = attention_mask_in_length
        real_tokens = lengths.sum(dim=-1)
        positions = torch.arange(seqlen, device=lengths.device, dtype=real_tokens.dtype)
        token_mask = positions[None, :] < real_tokens[:, None]
        flat = lengths.flatten()
        samples = flat[torch.nonzero(flat, as_tuple=False).flatten()]
        indices = torch.nonzero(token_mask.flatten(), as_tuple=False).flatten()
        max_seqlen = int(samples.max().item()) if samples.numel() else 0
        cu_seqlens = F.pad(torch.cumsum(samples, dim=0, dtype=torch.int32), (1, 0))
        packed = index_first_axis(hidden_states.reshape(batch * seqlen, *rest), indices)
        return packed, indices, cu_seqlens, max_seqlen
    import numpy as np

    lengths = np.asarray(attention_mask_in_length)
    token_mask = np.arange(seqlen)[None, :] < lengths.sum(axis=-1)[:, None]
    flat = lengths.reshape(-1)
    samples = flat[flat != 0]
    indices = np.flatnonzero(token_mask.reshape(-1))
    max_seqlen = int(samples.max()) if samples.size else 0
    cu_seqlens = np.concatenate([[0], np.cumsum(samples)]).astype(np.int32)
    packed = index_first_axis(np.asarray(hidden_states).reshape(batch * seqlen, *rest), indices)
    return packed, indices, cu_seqlens, max_seqlen


def pad_input(hidden_states: Array, indices: Array, batch: int, seqlen: int) -> Array:
    """The inverse of unpad_input: hidden_states packed (total, ...) -> (batch, seqlen, ...), with
    row i of hidden_states at flattened position indices[i] and zeros at the padding."""
    _args.first_tensor(hidden_states, "hidden_states")
    _args.tensor(indices, "indices", _args.array_kind(hidden_states))
    batch = _args.integer(batch, "batch", 0)
    seqlen = _args.integer(seqlen, "seqlen", 0)
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *output.shape[1:])
