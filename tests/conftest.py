"""Shared fixtures. ``fake_npu`` swaps the torch_npu test double in (tests/doubles)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest
import torch

#: Plugins of this suite: the guard that keeps processes out of the fast tier, the
#: expensive runs (the default report, a ZeRO-2 training, ...) made once per session, the
#: throw-away stages the report's tests plant, the xdist scheduling that keeps the tests
#: sharing one on one worker, and pytester
#: (test_process_guard.py and test_fixtures_workers.py run planted tests).
pytest_plugins = ["fixtures_processes", "fixtures_runs", "fixtures_stages", "fixtures_workers", "pytester"]

# One intra-op thread for torch in this process. The tests' models are tiny (hidden sizes of
# 32-64): a second OpenMP thread gains nothing on them, and on a 2-core machine shared with
# the workers a slow test starts (or with other jobs) the two threads spin-wait for each
# other: the in-process model tests ran 2-3x slower (test_zoo_stages.py: 50-73 s against
# 21-25 s). Child processes are not affected: the launcher and the inference grid set the
# thread counts of their workers themselves, and a notebook kernel has its own default.
torch.set_num_threads(1)

# matplotlib lists the host's fonts (``fc-list``, a child process) the first time it draws
# text on a machine without its font cache: done here, before any test, so the first fast
# test to draw a figure on a fresh machine is not refused a process it never asked for.
import matplotlib.font_manager  # noqa: E402,F401

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
def npu_smi_cards(monkeypatch):
    """The memory model's card figure as npu-smi would give it, in-process (the fast tier
    starts no npu-smi): eight 910B3 of 65,536 MB, or ``set(total_mb)`` per card."""
    from hyport_lib.devices.probe import DeviceListing, parse_npu_smi_info

    sample = (Path(__file__).parent / "data" / "npu_smi" / "910b_24x_classic.txt").read_text()

    def set_total(total_mb: int = 65536, count: int = 8):
        devices = parse_npu_smi_info(sample).devices[:1]
        listing = DeviceListing(devices=[dataclasses.replace(devices[0], index=i, hbm_total_mb=total_mb)
                                         for i in range(count)], source="npu-smi")
        monkeypatch.setattr("hyport_lib.memory.capacity.probe_devices", lambda backend: listing)
        return listing

    set_total()
    return set_total


@pytest.fixture
def fault_switches(monkeypatch):
    """Make the processes this test starts obey the ``HYPORT_TEST_*`` fault switches
    (tests/fault_injection/hyport_faults.py): that folder goes first on their PYTHONPATH."""
    from fault_injection.hyport_faults import with_fault_switches

    monkeypatch.setenv("PYTHONPATH", with_fault_switches(dict(os.environ))["PYTHONPATH"])


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


#: What shapes a zoo checkpoint: the zoo's own code, the hyport code it builds with, and the
#: versions of the libraries that write the files. A change to any makes a new cache folder.
_ZOO_SOURCES = (Path(__file__).parent / "zoo.py", Path(__file__).parent / "zoo_templates.py",
                REPO / "hyport_lib" / "models" / "tiny.py", REPO / "hyport_lib" / "models" / "loading.py")
_ZOO_PACKAGES = ("torch", "transformers", "tokenizers", "huggingface_hub", "safetensors", "torchvision")


def _zoo_cache_dir() -> Path:
    """``<hyport cache>/test-zoo/<key>``: the key hashes everything in _ZOO_SOURCES and
    _ZOO_PACKAGES, so a folder is only ever reused for the zoo it was built as."""
    import hashlib

    from hyport_lib.models.model_cache import default_cache_root
    from hyport_lib.utils.imports import package_version

    digest = hashlib.sha256()
    for path in _ZOO_SOURCES:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in _ZOO_PACKAGES:
        digest.update(f"{name}={package_version(name)}\0".encode())
    digest.update(sys.version.encode())
    return default_cache_root() / "test-zoo" / digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def zoo():
    """The zoo of tiny real-architecture checkpoints (tests/zoo.py): built once, kept in the
    hyport cache (as the tiny model is) under a key of what shapes it, and reused by later
    sessions. Read-only: a test that changes a checkpoint copies it first; a folder found
    changed at the end of the session fails it and loses its marker, so it is rebuilt."""
    import fcntl

    from fixtures_runs import fingerprint
    from zoo import MARKER_FILE, build_zoo

    root = _zoo_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    # Sessions running at once (CI jobs, several checkouts) build under one lock: build_zoo
    # removes a folder it finds incomplete, which would be another session's build.
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = build_zoo(root)
    before = {name: fingerprint(folder) for name, folder in built.items()}
    yield built
    changed = [name for name, folder in built.items() if fingerprint(folder) != before[name]]
    for name in changed:
        (built[name] / MARKER_FILE).unlink(missing_ok=True)
    assert not changed, f"tests changed the shared zoo checkpoints {changed} (copy one to tmp_path first)"
