"""Optional packages: cached availability checks (as accelerate's ``utils/imports.py``), where
a broken install is *reported*, not raised (``torch_npu`` without CANN fails on import,
``libhccl.so`` missing; only :func:`hyport_lib.backend.import_torch_npu` asks for it); their
versions; and flash-attn's API by version, one answer for the scan (the version a project
pins) and the drop-in (which serves that version's API).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import platform
import re
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


#: flash-attn 2.7 made ``bert_padding.unpad_input`` return 5 values instead of 4.
UNPAD_FIVE_FROM = (2, 7)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.7.4.post1+cu12"`` -> ``(2, 7, 4)``: the leading numeric parts."""
    parts = []
    for piece in str(version).split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def legacy_unpad(version: str) -> bool:
    """flash-attn before 2.7: ``bert_padding.unpad_input`` returns 4 values, not 5."""
    return version_tuple(version) < UNPAD_FIVE_FROM


def unpad_input_values(version: str) -> int:
    """How many values ``flash_attn.bert_padding.unpad_input`` returns in ``version``."""
    return 4 if legacy_unpad(version) else 5


#: flash-attn releases a pin is tried against, oldest first (one per minor version,
#: its last patch): enough to tell which ``unpad_input`` a range of versions gives.
FLASH_ATTN_RELEASES = ("1.0.9", "2.0.9", "2.1.2", "2.2.5", "2.3.6", "2.4.3", "2.5.9", "2.6.3",
                       "2.7.4.post1", "2.8.3")


def pinned_version(spec: str) -> Optional[str]:
    """The flash-attn version whose API code pinned by ``spec`` expects, or None when the
    pin does not tell (it allows versions on both sides of 2.7, or none that exist):
    ``"==2.6.3 (requirements.txt:2)"`` -> ``"2.6.3"``; ``"<2.7"`` -> ``"2.6.3"`` (the newest
    release it allows); ``"~=2.6"`` -> None (2.6 and 2.7 both qualify)."""
    text = re.sub(r"\s*\(.*\)\s*$", "", str(spec or "")).strip()
    # ==X, ===X, conda's =X, and a local build tag (==2.6.3+cu122) pin X itself
    exact = re.fullmatch(r"(?:===?|=)\s*(\d+(?:\.\d+)*(?:\.post\d+)?)(?:\+[\w.]+)?", text)
    if exact:
        return exact.group(1)
    try:
        from packaging.specifiers import SpecifierSet

        allowed = [v for v in FLASH_ATTN_RELEASES if SpecifierSet(text).contains(v, prereleases=True)]
    except (ImportError, ValueError):
        return None
    if not allowed or len({unpad_input_values(v) for v in allowed}) > 1:
        return None
    return allowed[-1]
