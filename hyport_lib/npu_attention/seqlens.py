"""Packed batches read from ``position_ids``, for the transformers hook.

A model calls attention once per layer with the same ``position_ids`` tensor; the
segments are read from the device once per tensor through the flash-attn module's
:data:`~hyport_lib.port.generated.flash_attn_ascend.HOST_CACHE` (which also holds the
host copies of ``cu_seqlens``), so 24 layers of one batch cost one device-to-host copy.
"""

from __future__ import annotations

from typing import Optional

import torch

from hyport_lib.port.generated.flash_attn_ascend import HOST_CACHE


def packed_segments(position_ids) -> Optional[tuple[int, ...]]:
    """Segment lengths of a packed batch, read from ``position_ids`` (cached per tensor).

    A batch counts as packed when, over the flattened ``(B*S,)`` tokens, every segment
    (a run where the position grows by exactly 1) starts at position 0 and there are
    more segments than rows. Left-padded generation batches (pads carry position 1)
    and plain batches (one ``arange`` per row) are therefore *not* packed.

    Returns:
        Segment lengths in flattened order, or ``None`` when the batch is not packed.
    """
    if position_ids is None or not hasattr(position_ids, "dim") or position_ids.dim() not in (1, 2):
        return None

    def compute():
        pos = position_ids if position_ids.dim() == 2 else position_ids.unsqueeze(0)
        rows, length = pos.shape
        if length == 0:
            return None
        first = pos[:, :1] - 1
        starts = torch.diff(pos, prepend=first, dim=-1) != 1
        starts[:, 0] = True
        flat_starts = starts.reshape(-1)
        start_idx = torch.nonzero(flat_starts).flatten()
        start_pos = pos.reshape(-1)[start_idx]
        # One small host transfer carries both the boundaries and their first positions.
        host = torch.stack([start_idx, start_pos.to(start_idx.dtype)]).tolist()
        idx, first_pos = host
        if len(idx) <= rows or any(p != 0 for p in first_pos):
            return None
        ends = idx[1:] + [rows * length]
        return tuple(e - s for s, e in zip(idx, ends))

    return HOST_CACHE.get("packed_segments", (position_ids,), compute)

