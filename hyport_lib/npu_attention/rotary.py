"""``flash_attn.layers.rotary`` in plain torch (flash-attn uses a Triton kernel).

Same arguments and layout rules as flash-attn: ``cos``/``sin`` are
``(seqlen_rotary, rotary_dim / 2)``; the first ``rotary_dim`` channels of the head are
rotated, the rest pass through; ``interleaved=False`` rotates the two halves
(GPT-NeoX), ``interleaved=True`` rotates even/odd pairs (GPT-J). Positions start at
``seqlen_offsets`` (an int or one per batch row) and, with ``cu_seqlens``, restart at
each packed sequence. The rotation is computed in fp32 and cast back, as the kernel does.
"""

from __future__ import annotations

from typing import Optional, Union

import torch


def _positions(x, seqlen_offsets, cu_seqlens) -> torch.Tensor:
    """Rotary position of every token: (B, S) for BSHD input, (T,) for packed input."""
    if cu_seqlens is None:
        batch, seqlen = x.shape[0], x.shape[1]
        pos = torch.arange(seqlen, device=x.device).unsqueeze(0).expand(batch, seqlen)
        if isinstance(seqlen_offsets, torch.Tensor):
            if seqlen_offsets.numel() not in (1, batch):
                raise ValueError(f"seqlen_offsets must be an int or have {batch} entries, "
                                 f"got shape {tuple(seqlen_offsets.shape)}")
            return pos + seqlen_offsets.reshape(-1, 1).to(x.device, torch.long)
        return pos + int(seqlen_offsets)
    cu = cu_seqlens.to(x.device, torch.long)
    total = x.shape[0]
    if int(cu[-1]) != total:
        raise ValueError(f"cu_seqlens ends at {int(cu[-1])} but x has {total} tokens")
    seq_index = torch.searchsorted(cu[1:], torch.arange(total, device=x.device), right=True)
    pos = torch.arange(total, device=x.device) - cu[seq_index]
    if isinstance(seqlen_offsets, torch.Tensor):
        return pos + seqlen_offsets.to(x.device, torch.long).reshape(-1)[seq_index]
    return pos + int(seqlen_offsets)


def _rotate(x, cos, sin, interleaved: bool):
    """Rotate the last dim of ``x`` (float32) by per-token ``cos``/``sin`` (..., rd/2)."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False,
                     seqlen_offsets: Union[int, torch.Tensor] = 0,
                     cu_seqlens: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None):
    """Rotary embedding on the first ``rotary_dim`` channels of ``x``.

    Args:
        x: (batch, seqlen, nheads, headdim), or (total, nheads, headdim) with ``cu_seqlens``.
        cos, sin: (seqlen_rotary, rotary_dim / 2).
        interleaved: rotate even/odd pairs (GPT-J) instead of halves (GPT-NeoX).
        inplace: write the result into ``x`` and return it.
        seqlen_offsets: int or (batch,) tensor, position of each row's first token.
        cu_seqlens: (batch + 1,) for packed input; positions restart per sequence.
        max_seqlen: accepted for signature compatibility.
    """
    rotary_dim = cos.shape[-1] * 2
    if rotary_dim > x.shape[-1]:
        raise ValueError(f"rotary_dim {rotary_dim} (2 * cos.shape[-1]) exceeds headdim {x.shape[-1]}")
    if sin.shape != cos.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must match")
    pos = _positions(x, seqlen_offsets, cu_seqlens)
    # Like the Triton kernel, positions past the table get cos=1, sin=0 (no rotation);
    # checking on the host instead would cost a device sync per call.
    inside = (pos < cos.shape[0]).unsqueeze(-1)
    pos = pos.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside, cos.float()[pos], 1.0).unsqueeze(-2)  # broadcast over heads
    s = torch.where(inside, sin.float()[pos], 0.0).unsqueeze(-2)
    rotated = _rotate(x[..., :rotary_dim].float(), c, s, interleaved).to(x.dtype)
    if inplace:
        x[..., :rotary_dim] = rotated
        return x
    if rotary_dim == x.shape[-1]:
        return rotated
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)


#: flash-attn keeps this alias for backward compatibility.
apply_rotary_emb_func = apply_rotary_emb


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False,
                          seqlen_offsets: Union[int, torch.Tensor] = 0,
                          num_heads_q: Optional[int] = None):
    """In place on Q and K of ``qkv`` (B, S, 3, H, D) or (B, S, Hq + 2 Hk, D)."""
    cos_k = cos if cos_k is None else cos_k
    sin_k = sin if sin_k is None else sin_k
    if qkv.dim() == 5:
        q, k = qkv[:, :, 0], qkv[:, :, 1]
    else:
        if num_heads_q is None:
            raise ValueError("apply_rotary_emb_qkv_: num_heads_q is required for 4-D qkv")
        num_heads_k = (qkv.shape[2] - num_heads_q) // 2
        q = qkv[:, :, :num_heads_q]
        k = qkv[:, :, num_heads_q:num_heads_q + num_heads_k]
    apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
    apply_rotary_emb(k, cos_k, sin_k, interleaved, True, seqlen_offsets)
    return qkv


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False,
                         seqlen_offsets: Union[int, torch.Tensor] = 0):
    """In place on K of ``kv`` (B, S, 2, H, D)."""
    apply_rotary_emb(kv[:, :, 0], cos, sin, interleaved, True, seqlen_offsets)
    return kv
