"""Attention stage: the flash-attn drop-in, its NPU mapping, and the transformers hook.

Importing this package is cheap (no torch, no torch_npu): every public name is
resolved on first access through the module-level ``__getattr__``.

Public names:
    FlashAttnAPI: flash-attn's functions bound to one backend (npu, npu-emulated, sdpa).
    install_flash_attn_shim / uninstall_flash_attn_shim: put a ``flash_attn`` package
        into ``sys.modules`` for unmodified remote model code, and take it out again.
    register_hyport_attention: register an attention function with transformers'
        ``AttentionInterface`` and return the name for ``attn_implementation=``.
    npu_fusion_attention: the CPU emulation of ``torch_npu.npu_fusion_attention``.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "FlashAttnAPI": "hyport_lib.attention.flash_api",
    "install_flash_attn_shim": "hyport_lib.attention.shim",
    "uninstall_flash_attn_shim": "hyport_lib.attention.shim",
    "register_hyport_attention": "hyport_lib.attention.hf_integration",
    "npu_fusion_attention": "hyport_lib.attention.emulation",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
