"""Sequence-length bookkeeping shared by the flash-attn drop-in and the transformers hook.

flash-attn describes a packed batch with ``cu_seqlens``, a device tensor with a leading
0; ``torch_npu.npu_fusion_attention`` wants ``actual_seq_qlen``, a *host* list of
cumulative ends without the 0. Moving a device tensor to the host synchronises the
device, and a model calls attention once per layer with the same ``cu_seqlens``
tensor. :class:`IdentityCache` remembers the conversion per tensor object (and its
in-place version), so 24 layers of one batch cost one device-to-host copy, not 24.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable, Optional, Sequence


def _version(tensor) -> Optional[int]:
    try:
        return int(tensor._version)
    except (AttributeError, RuntimeError):  # inference-mode tensors track no version
        return None


class IdentityCache:
    """Memo keyed by the identity (and in-place version) of tensors.

    A hit requires the very same tensor objects, alive, with unchanged ``_version``.
    Tensors without a version (created under ``torch.inference_mode``) are never cached.
    Writes that bypass autograd's version counter (through ``.data`` or a NumPy array
    sharing the memory) are invisible to it: refill such buffers with ordinary
    in-place ops, or pass a new tensor per batch.
    Keys hold weak references only, and an entry is dropped as soon as one of its
    tensors is freed, so a new tensor that reuses a freed address never sees a stale
    value and cached device masks do not outlive their batch.

    Attributes:
        misses: how many values were computed (for tensors: device-to-host syncs).
        hits: how many lookups were answered from the cache.
    """

    def __init__(self, maxsize: int = 32):
        self.maxsize = maxsize
        self.misses = 0
        self.hits = 0
        self._entries: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._lock = threading.RLock()  # weakref callbacks may fire while it is held

    def get(self, tag: Hashable, tensors: Sequence, compute: Callable[[], object]):
        """Value for ``(tag, tensors)``; ``compute()`` runs on a miss. ``None`` items allowed."""
        key = (tag, *(id(t) for t in tensors))
        versions = tuple(None if t is None else _version(t) for t in tensors)
        if any(v is None and t is not None for v, t in zip(versions, tensors)):
            # Inference-mode tensors track no version, so an in-place refill of a reused
            # buffer would look unchanged: compute every time rather than risk stale lengths.
            with self._lock:
                self.misses += 1
            return compute()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                refs, old_versions, value = entry
                alive = all((r is None and t is None) or (r is not None and r() is t)
                            for r, t in zip(refs, tensors))
                if alive and old_versions == versions:
                    self.hits += 1
                    self._entries.move_to_end(key)
                    return value
        value = compute()
        with self._lock:
            self.misses += 1
            drop = _dropper(self, key)
            refs = tuple(None if t is None else weakref.ref(t, drop) for t in tensors)
            self._entries[key] = (refs, versions, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.misses = 0
            self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)


def _dropper(cache: IdentityCache, key: tuple):
    cache_ref = weakref.ref(cache)

    def drop(_ref):
        owner = cache_ref()
        if owner is not None:
            with owner._lock:
                owner._entries.pop(key, None)

    return drop


#: Process-wide cache of host copies of ``cu_seqlens`` / ``position_ids`` summaries.
HOST_CACHE = IdentityCache()


def host_cu_seqlens(cu_seqlens, name: str = "cu_seqlens") -> tuple[int, ...]:
    """``cu_seqlens`` (with its leading 0) as a host tuple, one device sync per tensor.

    Args:
        cu_seqlens: 1-D int tensor or a Python sequence, flash-attn style ``[0, l0, l0+l1, ...]``.
        name: argument name used in error messages.
    """
    if not hasattr(cu_seqlens, "tolist"):
        values = tuple(int(x) for x in cu_seqlens)
    else:
        if cu_seqlens.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(cu_seqlens.shape)}")
        values = HOST_CACHE.get("cu_seqlens", (cu_seqlens,),
                                lambda: tuple(int(x) for x in cu_seqlens.tolist()))
    if len(values) < 2 or values[0] != 0:
        raise ValueError(f"{name} must start with 0 and hold batch+1 entries, got {list(values)[:8]}")
    if any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be non-decreasing, got {list(values)[:8]}")
    return values


def host_sync_count() -> int:
    """Device-to-host conversions done so far by :data:`HOST_CACHE` (for tests and benches)."""
    return HOST_CACHE.misses


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
        import torch

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


def cumulative(lengths: Sequence[int]) -> tuple[int, ...]:
    """Lengths -> flash-attn ``cu_seqlens`` values (leading 0)."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return tuple(out)
