"""``RotaryEmbedding``: the torch.nn.Module of ``flash_attn.layers.rotary`` (RoFormer's rotary
position embedding, with XPos scaling when scale_base is given), over flashattn.rotary's functions.
Imported on first use of ``flashattn.rotary.RotaryEmbedding`` (it imports torch)."""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch

from .rotary import apply_rotary_emb, apply_rotary_emb_kv_, apply_rotary_emb_qkv_


class RotaryEmbedding(torch.nn.Module):
    """Rotary position embedding applied in place to packed qkv (or to q and a packed kv).

    Arguments:
        dim: the rotary dimension (rotary_dim <= headdim; the first dim features rotate).
        base: the frequency base: feature pair i turns by position * base ** (-2i / dim).
        interleaved: False rotates pairs (i, i + dim / 2) (GPT-NeoX), True pairs (2i, 2i + 1) (GPT-J).
        scale_base: None, or XPos's scale base (e.g. 512): q is scaled by scale ** (position /
            scale_base) and k by its inverse, centred on the cached length.
        device: where the inverse frequencies live.

    The cos/sin tables are computed in float32 (as upstream: positions times frequencies lose too
    much in bfloat16) and cached in the inputs' dtype, grown when a longer sequence comes."""

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False, scale_base: Optional[float] = None,
                 device: Any = None) -> None:
        super().__init__()
        self.dim = int(dim)
        self.base = float(base)
        self.interleaved = interleaved
        self.scale_base = scale_base
        self.register_buffer("inv_freq", self._inv_freq(device), persistent=False)
        self.register_buffer("scale", self._xpos_scale(device) if scale_base is not None else None, persistent=False)
        self._seq_len_cached = 0
        self._cos_cached: Optional[torch.Tensor] = None
        self._sin_cached: Optional[torch.Tensor] = None
        self._cos_k_cached: Optional[torch.Tensor] = None
        self._sin_k_cached: Optional[torch.Tensor] = None

    def _inv_freq(self, device: Any = None) -> torch.Tensor:
        exponents = torch.arange(0, self.dim, 2, device=device, dtype=torch.float32) / self.dim
        return 1.0 / (self.base ** exponents)

    def _xpos_scale(self, device: Any = None) -> torch.Tensor:
        return (torch.arange(0, self.dim, 2, device=device, dtype=torch.float32) + 0.4 * self.dim) / (1.4 * self.dim)

    def _update_cos_sin_cache(self, seqlen: int, device: Any = None, dtype: Any = None) -> None:
        stale = (seqlen > self._seq_len_cached or self._cos_cached is None or self._cos_cached.device != device
                 or self._cos_cached.dtype != dtype or (self.training and self._cos_cached.is_inference()))
        if not stale:
            return
        self._seq_len_cached = seqlen
        positions = torch.arange(seqlen, device=device, dtype=torch.float32)
        # float32 whatever the module was cast to: a bf16 inv_freq would shift every angle.
        inv_freq = self.inv_freq if self.inv_freq.dtype == torch.float32 else self._inv_freq(device)
        angles = torch.outer(positions, inv_freq.to(device))
        if self.scale is None:
            self._cos_cached = torch.cos(angles).to(dtype)
            self._sin_cached = torch.sin(angles).to(dtype)
            return
        scale = self.scale if self.scale.dtype == torch.float32 else self._xpos_scale(self.scale.device)
        power = (positions - seqlen // 2) / self.scale_base
        scale = scale.to(device) ** power[:, None]
        self._cos_cached = (torch.cos(angles) * scale).to(dtype)
        self._sin_cached = (torch.sin(angles) * scale).to(dtype)
        self._cos_k_cached = (torch.cos(angles) / scale).to(dtype)
        self._sin_k_cached = (torch.sin(angles) / scale).to(dtype)

    def forward(self, qkv: torch.Tensor, kv: Optional[torch.Tensor] = None,
                seqlen_offset: Union[int, torch.Tensor] = 0, max_seqlen: Optional[int] = None,
                num_heads_q: Optional[int] = None) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Rotates in place and returns qkv (or (q, kv)).

        qkv: (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, num_heads_q + 2 * num_heads_k,
            headdim) with num_heads_q; when kv is given, q alone (batch, seqlen, nheads, headdim).
        kv: optional (batch, seqlen, 2, nheads_k, headdim).
        seqlen_offset: int or (batch,) tensor: the position of each sequence's first token. With a
            tensor, pass max_seqlen so that the tables cover every position.
        max_seqlen: grow the tables to this many positions."""
        seqlen = qkv.shape[1]
        if max_seqlen is not None:
            self._update_cos_sin_cache(int(max_seqlen), device=qkv.device, dtype=qkv.dtype)
        elif isinstance(seqlen_offset, int):
            self._update_cos_sin_cache(seqlen + seqlen_offset, device=qkv.device, dtype=qkv.dtype)
        xpos = self.scale is not None
        if kv is None:
            return apply_rotary_emb_qkv_(qkv, self._cos_cached, self._sin_cached,
                                         self._cos_k_cached if xpos else None, self._sin_k_cached if xpos else None,
                                         interleaved=self.interleaved, seqlen_offsets=seqlen_offset,
                                         num_heads_q=num_heads_q)
        q = apply_rotary_emb(qkv, self._cos_cached, self._sin_cached, interleaved=self.interleaved, inplace=True,
                             seqlen_offsets=seqlen_offset)
        kv = apply_rotary_emb_kv_(kv, self._cos_k_cached if xpos else self._cos_cached,
                                  self._sin_k_cached if xpos else self._sin_cached, interleaved=self.interleaved,
                                  seqlen_offsets=seqlen_offset)
        return q, kv
