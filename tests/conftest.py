"""Shared fixtures. ``fake_npu`` swaps the torch_npu test double in (tests/doubles)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

#: Plugins of this suite: the guard that keeps processes out of the fast tier, the
#: expensive runs (the default report, a ZeRO-2 training, ...) made once per session, and
#: pytester (test_process_guard.py runs the guard on planted tests).
pytest_plugins = ["fixtures_processes", "fixtures_runs", "pytester"]

DOUBLES = Path(__file__).parent / "doubles"
REPO = Path(__file__).resolve().parents[1]


def _forget_torch_npu():
    for name in list(sys.modules):
        if name == "torch_npu" or name.startswith("torch_npu."):
            del sys.modules[name]


@pytest.fixture
def fake_npu(monkeypatch):
    """Make the torch_npu double importable here and in child processes.

    Yields the imported double. torch.npu and torch.cuda patches are undone after the
    test, so other tests see a plain CPU host again.
    """
    import torch

    from hyport_lib.utils.imports import clear_import_caches

    monkeypatch.syspath_prepend(str(DOUBLES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(DOUBLES), str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("PATH", f"{DOUBLES / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(torch.cuda, "is_available", torch.cuda.is_available)
    monkeypatch.setattr(torch.cuda, "device_count", torch.cuda.device_count)
    had_npu = hasattr(torch, "npu")
    old_npu = getattr(torch, "npu", None)
    _forget_torch_npu()
    clear_import_caches()
    import torch_npu

    assert getattr(torch_npu, "__hyport_double__", False)
    yield torch_npu
    _forget_torch_npu()
    clear_import_caches()
    if had_npu:
        torch.npu = old_npu
    elif hasattr(torch, "npu"):
        del torch.npu


@pytest.fixture
def npu_smi_sample(monkeypatch, tmp_path):
    """Point the fake npu-smi at a sample text; returns a setter."""

    def use(text: str) -> Path:
        path = tmp_path / "npu_smi.txt"
        path.write_text(text, encoding="utf-8")
        monkeypatch.setenv("HYPORT_FAKE_NPU_SMI_FILE", str(path))
        return path

    return use


def _host_kind() -> str:
    from hyport_lib.backend import detect_kind

    try:
        return detect_kind()
    except Exception:  # noqa: BLE001 — a broken accelerator stack is "not a CPU host" too
        return "unknown"


#: What this host is: tests about a CPU-only host skip elsewhere (as accelerate's
#: ``require_*`` decorators do), so the suite also runs on a GPU or NPU machine.
HOST_KIND = _host_kind()
requires_cpu_host = pytest.mark.skipif(
    HOST_KIND != "cpu", reason=f"about a CPU-only host; this host has {HOST_KIND}")


def _missing_packages() -> list[str]:
    from hyport_lib.environment.checks import REQUIRED_PACKAGES
    from hyport_lib.utils.imports import package_version

    return [p for p in REQUIRED_PACKAGES if not package_version(p)]


requires_full_stack = pytest.mark.skipif(
    bool(_missing_packages()), reason=f"needs every required package ({', '.join(_missing_packages())} missing)")


@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    """The zoo of tiny real-architecture checkpoints (tests/zoo.py), built once per session."""
    from zoo import build_zoo

    return build_zoo(tmp_path_factory.mktemp("zoo"))
