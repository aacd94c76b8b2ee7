"""Cached availability checks for optional packages (as accelerate's ``utils/imports.py``):
a broken install is *reported*, not raised. ``torch_npu`` without CANN fails on import
(``libhccl.so`` missing); only :func:`hyport_lib.backend.import_torch_npu` asks for it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import platform
import sys
from typing import Optional


@functools.lru_cache(maxsize=None)
def package_version(dist_name: str) -> Optional[str]:
    """Installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def try_import(module_name: str) -> tuple[object | None, Optional[str]]:
    """``(module, None)``; ``(None, None)`` when not installed; ``(None, "<ExcType>: message")``
    when installed but broken."""
    try:
        if importlib.util.find_spec(module_name) is None:
            return None, None
    except (ImportError, ValueError) as exc:  # a parent package that fails to import
        return None, f"{type(exc).__name__}: {exc}"
    try:
        return importlib.import_module(module_name), None
    except Exception as exc:  # noqa: BLE001 — an installed package whose import raises
        # anything (a torch_npu built for another torch raises AttributeError from its
        # dynamo glue) is broken, and saying so is the environment check's whole point.
        return None, f"{type(exc).__name__}: {exc}"


def is_flash_attn_available() -> bool:
    """True when a *real* ``flash_attn`` imports (hyport's shim does not count)."""
    module, _ = try_import("flash_attn")
    return module is not None and not getattr(module, "__hyport_shim__", False)


def clear_import_caches() -> None:
    """Forget cached answers (tests swap modules in and out of ``sys.modules``)."""
    package_version.cache_clear()
    try_import.cache_clear()


#: The distributions whose versions a report and stage 01 list.
VERSION_PACKAGES = ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "safetensors", "tokenizers",
                    "huggingface_hub", "papermill", "nbconvert", "jupyterlab", "ipywidgets", "pandas", "numpy",
                    "flash_attn", "hyport")


def collect_versions() -> dict[str, Optional[str]]:
    """Installed versions from package metadata (imports nothing heavy)."""
    versions: dict[str, Optional[str]] = {"python": platform.python_version()}
    for dist in VERSION_PACKAGES:
        versions[dist] = package_version(dist)
    npu = sys.modules.get("torch_npu")
    if versions["torch_npu"] is None and npu is not None:
        versions["torch_npu"] = getattr(npu, "__version__", None)  # e.g. a source build
    return versions
