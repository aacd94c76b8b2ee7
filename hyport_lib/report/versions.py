"""Versions shown on the report index (delegates to the environment stage)."""

from __future__ import annotations

from hyport_lib.utils.imports import package_version

_PACKAGES = ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "safetensors",
             "papermill", "nbconvert", "jupyterlab", "ipywidgets", "hyport")


def collect_versions_safely() -> dict:
    """Installed versions; prefers the environment stage's collector when present."""
    try:
        from hyport_lib.environment import collect_versions
    except ImportError:
        collect_versions = None
    if collect_versions is not None:
        return dict(collect_versions())
    return {name: package_version(name.replace("_", "-")) or package_version(name) for name in _PACKAGES}
