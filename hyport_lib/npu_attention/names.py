"""hyport's attention names, the backend each one means, and which names a process could load.

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


def check_attn_implementation(name: str, param: str = "attn_implementation") -> None:
    """Refuse, before any process starts, an attention name no process could load:
    transformers' own, one registered with its AttentionInterface, one of hyport's
    (registered in each worker), a hub kernel (``org/repo``) or a ``paged|...`` variant of these."""
    from transformers import AttentionInterface

    known = {"eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"}
    registered = set(getattr(AttentionInterface, "_global_mapping", {}) or {})
    text = str(name or "")
    base = text.split("|", 1)[1] if text.startswith("paged|") else text
    if base.startswith("hyport") and base not in registered:
        backend_of(base)  # a name no worker registers is refused here, not on every card
        return
    if base in known | registered or "/" in base:
        return
    raise ValueError(f"{param}={name!r}: not an attention transformers knows; expected one of "
                     f"{', '.join(sorted(known | registered))}, a hyport_* name or a hub kernel")
