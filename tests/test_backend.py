"""The backend seam: detection, the transfer_to_npu trap, per-backend answers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from hyport_lib import backend as B

from conftest import requires_cpu_host


@requires_cpu_host
def test_cpu_is_detected_on_this_host():
    be = B.get_backend("auto")
    assert be.kind == "cpu"
    assert be.device(3) == "cpu"
    assert be.dist_backend == "gloo"
    assert be.visible_devices_var is None
    assert be.num_cards() == B.DEFAULT_CPU_CARDS
    assert B.get_backend("cpu", num_cards=5).num_cards() == 5


def test_cpu_memory_is_process_rss():
    stats = B.get_backend("cpu").memory_stats()
    assert stats.source == "process-rss"
    assert 10 * 2**20 < stats.allocated <= stats.peak


def test_unknown_device_names_the_argument():
    with pytest.raises(ValueError, match="device='tpu'"):
        B.get_backend("tpu")


def test_explicit_npu_without_torch_npu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="device='npu' requested"):
        B.get_backend("npu")


@requires_cpu_host
def test_explicit_cuda_on_cpu_build_is_a_clear_error():
    with pytest.raises(RuntimeError, match="device='cuda' requested"):
        B.get_backend("cuda")


def test_npu_detected_through_the_double(fake_npu, monkeypatch):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "8")
    be = B.get_backend("auto")
    assert be.kind == "npu"
    assert be.device(7) == "npu:7"
    assert be.dist_backend == "hccl"
    assert be.visible_devices_var == "ASCEND_RT_VISIBLE_DEVICES"
    assert be.num_cards() == 8
    assert B.get_backend("npu", num_cards=4).num_cards() == 4
    assert be.visible_devices_env([0, 1, 2]) == {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2"}
    stats = be.memory_stats(2)
    assert stats.source == "device" and stats.allocated == 3 * 2**20
    be.reset_peak_memory(2)
    assert be.memory_stats(2).peak == stats.allocated
    be.set_device(1)
    be.synchronize()
    assert be.supports_bf16() is True
    monkeypatch.setenv("HYPORT_FAKE_NPU_BF16", "0")
    assert be.supports_bf16() is False


@requires_cpu_host
def test_npu_with_no_cards_falls_back_to_cpu(fake_npu, monkeypatch):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "0")
    assert B.get_backend("auto").kind == "cpu"


@requires_cpu_host
def test_transfer_to_npu_trap(fake_npu, monkeypatch):
    """After transfer_to_npu, torch.cuda answers for the NPU: must not look like CUDA."""
    import torch_npu.contrib.transfer_to_npu  # noqa: F401  (patches torch.cuda)

    assert torch.cuda.is_available() is True  # the trap is armed
    assert B.transfer_to_npu_active()
    assert B.get_backend("auto").kind == "npu"
    # Even a CUDA-looking build must not be believed while torch.cuda is redirected.
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    assert B.cuda_available() is False
    with pytest.raises(RuntimeError, match="transfer_to_npu"):
        B.get_backend("cuda")
    # With the NPU gone, the redirected torch.cuda must not turn into a CUDA backend.
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "0")
    assert B.get_backend("auto").kind == "cpu"


def test_cuda_detected_when_the_runtime_reports_devices(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    be = B.get_backend("auto")
    assert be.kind == "cuda"
    assert be.device(1) == "cuda:1"
    assert be.dist_backend == "nccl"
    assert be.visible_devices_env([3]) == {"CUDA_VISIBLE_DEVICES": "3"}
    assert be.num_cards() == 2


@pytest.mark.slow
@requires_cpu_host
def test_broken_torch_npu_is_reported_not_fatal(tmp_path, monkeypatch):
    """An installed torch_npu that fails on import (no CANN) must not crash detection."""
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file')\n")
    code = ("from hyport_lib.backend import detect_kind, get_backend\n"
            "from hyport_lib.backend import import_torch_npu\n"
            "print(detect_kind()); print(import_torch_npu()[1])\n"
            "try:\n    get_backend('npu')\nexcept RuntimeError as e:\n    print('ERR', e)\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "cpu"
    assert "libhccl.so" in lines[1]
    assert lines[2].startswith("ERR device='npu' requested") and "libhccl.so" in lines[2]
