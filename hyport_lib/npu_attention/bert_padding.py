"""``flash_attn.bert_padding`` re-implemented in plain torch (no einops, no CUDA).

Same names, signatures and return values as flash-attn 2.7: ``unpad_input`` returns
five values (``..., max_seqlen_in_batch, seqused``). flash-attn releases before 2.7
returned four; the shim builds its ``bert_padding`` module with ``legacy_unpad=True``
for such a version (see :func:`make_unpad_input`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class IndexFirstAxis(torch.autograd.Function):
    """``input[indices]`` on the first axis, with a scatter backward."""

    @staticmethod
    def forward(ctx, input, indices):  # noqa: A002 - flash-attn's argument name
        ctx.save_for_backward(indices)
        if input.dim() < 2:
            raise ValueError(f"index_first_axis: input must have >= 2 dims, got {input.dim()}")
        ctx.first_axis_dim = input.shape[0]
        return input[indices]

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        grad_input = grad_output.new_zeros((ctx.first_axis_dim, *grad_output.shape[1:]))
        grad_input[indices] = grad_output
        return grad_input, None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    """Scatter ``values`` into a zero tensor of ``first_axis_dim`` rows."""

    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        ctx.save_for_backward(indices)
        if indices.dim() != 1:
            raise ValueError(f"index_put_first_axis: indices must be 1-D, got {indices.dim()}-D")
        output = values.new_zeros((first_axis_dim, *values.shape[1:]))
        output[indices] = values
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        return grad_output[indices], None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """Drop padding tokens.

    Args:
        hidden_states: (batch, seqlen, ...).
        attention_mask: (batch, seqlen), bool/int, 1 = valid token.
        unused_mask: (batch, seqlen), 1 = allocated but unused (kept in the output).

    Returns:
        ``(hidden_states (total, ...), indices (total,), cu_seqlens (batch+1,) int32,
        max_seqlen_in_batch int, seqused (batch,) int32)``.
    """
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return (index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch,
            used_seqlens_in_batch)


def make_unpad_input(legacy_unpad: bool):
    """``unpad_input`` as a given flash-attn version has it (4 results before 2.7)."""
    if not legacy_unpad:
        return unpad_input

    def unpad_input_legacy(hidden_states, attention_mask):
        return unpad_input(hidden_states, attention_mask)[:4]

    unpad_input_legacy.__name__ = "unpad_input"
    unpad_input_legacy.__doc__ = unpad_input.__doc__
    return unpad_input_legacy


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Unpad rows that each concatenate several samples.

    ``attention_mask_in_length`` (batch, seqlen) lists each row's sample lengths
    followed by zeros, e.g. ``[[2, 3, 0, 0, 0, 0], ...]``.

    Returns:
        ``(hidden_states, indices, cu_seqlens, max_seqlen_in_batch)``.
    """
    length = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    positions = torch.arange(seqlen, device=length.device, dtype=length.dtype)
    attention_mask_2d = positions.expand(len(length), seqlen) < length.unsqueeze(1)
    real = torch.nonzero(attention_mask_in_length.flatten(), as_tuple=False).flatten()
    seqlens_in_batch = attention_mask_in_length.flatten()[real]
    indices = torch.nonzero(attention_mask_2d.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """Inverse of :func:`unpad_input`: (total, ...) -> (batch, seqlen, ...), zeros at pads."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])
