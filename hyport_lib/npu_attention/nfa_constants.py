"""Constants of the ``npu_fusion_attention`` contract shared by caller and emulation.

One place for the "no limit" band value and the compressed causal mask, so the NPU
branch of the drop-in, the emulation that checks it and the reference all agree.
"""

from __future__ import annotations

import threading

import torch

#: ``pre_tockens`` / ``next_tockens`` meaning "no limit" (INT32_MAX).
NFA_MAX_TOKENS = 2147483647
#: Side of the compressed ``triu(ones, 1)`` mask that sparse modes 2-4, 7 and 8 take.
COMPRESSED_MASK_SIZE = 2048

_lock = threading.Lock()
_masks: dict[str, torch.Tensor] = {}


def compressed_causal_mask(device=None) -> torch.Tensor:
    """The 2048x2048 ``triu(ones, 1)`` bool mask (True = masked), cached per device.

    Built once per device: the NPU branch passes the same tensor on every layer, and
    the emulation recognises it by identity before falling back to a full comparison.
    """
    key = str(torch.device(device) if device is not None else torch.device("cpu"))
    with _lock:
        mask = _masks.get(key)
        if mask is None:
            mask = torch.ones(COMPRESSED_MASK_SIZE, COMPRESSED_MASK_SIZE, dtype=torch.bool,
                              device=key).triu(1)
            _masks[key] = mask
    return mask
