"""hyport's attention names and the backend each one means (which names a device can run:
:mod:`hyport_lib.npu_attention.runnable`).

No torch here: plans import it. No "sdpa" in a name: transformers then runs its
SDPA-support check on the model (``_supports_sdpa``), which remote-code models fail
although hyport needs no support.
"""

from __future__ import annotations

#: FlashAttnAPI backend -> the name hyport registers it under with transformers.
NAME_OF_BACKEND = {"npu": "hyport_npu_fused", "npu-emulated": "hyport_npu_emulated", "sdpa": "hyport_torch"}
BACKEND_OF_NAME = {name: backend for backend, name in NAME_OF_BACKEND.items()}


def backend_of(name: str) -> str:
    """The FlashAttnAPI backend of a hyport attention name; ValueError for any other name."""
    if name not in BACKEND_OF_NAME:
        raise ValueError(f"attn_implementation={name!r}: not one of hyport's attentions "
                         f"({', '.join(sorted(BACKEND_OF_NAME))})")
    return BACKEND_OF_NAME[name]


def check_runs_on(name: str, device_kind: str) -> None:
    """Refuse a hyport attention the run's device cannot serve (the fused kernel off an NPU)."""
    if backend_of(name) == "npu" and device_kind != "npu":
        raise ValueError(f"attn_implementation={name!r}: npu_fusion_attention runs on an Ascend NPU "
                         f"only, and this run's device is {device_kind}; use "
                         f"{NAME_OF_BACKEND['npu-emulated']!r} (its CPU emulation) or "
                         f"{NAME_OF_BACKEND['sdpa']!r}")
