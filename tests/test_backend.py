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


# --- precision: bf16 where the device computes it natively ---------------------------------
CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\nflags\t\t: {flags}\n\n" \
          "processor\t: 1\nflags\t\t: {flags}\n"
AVX2_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c"


@pytest.mark.parametrize("extra, native", [("", False), ("avx512f avx512bw", False),
                                           ("avx512f avx512_bf16", True), ("amx_tile amx_bf16 amx_int8", True)])
def test_a_cpu_trains_in_bf16_only_with_amx_or_avx512_bf16(tmp_path, monkeypatch, extra, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(model="Xeon", flags=f"{AVX2_FLAGS} {extra}"))
    monkeypatch.setattr(B, "CPUINFO_PATH", str(cpuinfo))
    cpu = B.get_backend("cpu")
    auto = cpu.choose_precision("auto")
    assert (auto.precision, auto.native_bf16) == (("bf16", True) if native else ("fp32", False))
    if native:
        assert auto.reason.startswith("bf16 (auto): this CPU computes bf16 natively (")
    else:
        assert auto.reason == (f"float32 (auto): this CPU has no native bf16 (no AMX, no AVX512-BF16 in "
                               f"{cpuinfo}); bf16 would be emulated in software, about 13x slower than float32")
    asked = cpu.choose_precision("bf16")  # the NPU's dtype stays available, its cost said
    assert asked.precision == "bf16" and ("is emulated in software" in asked.reason) is not native
    assert cpu.choose_precision("fp32").reason == "fp32, as asked (precision='fp32')"


def test_cpu_flags_that_cannot_be_read_mean_float32_and_say_why(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "CPUINFO_PATH", str(tmp_path / "absent"))
    auto = B.get_backend("cpu").choose_precision()
    assert auto.precision == "fp32" and "absent: No such file or directory" in auto.reason
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # no x86 flags line
    assert B.cpu_flags(str(arm)) == (None, f"{arm} has no flags line in its first 64 KiB")
    huge = tmp_path / "huge"  # read bounded: a flags line past the limit is not reached
    huge.write_text("x" * B.CPUINFO_READ_LIMIT + "\nflags\t: amx_bf16\n")
    assert B.cpu_flags(str(huge))[0] is None


@pytest.mark.parametrize("capabilities, native", [([(8, 0)], True), ([(9, 0), (9, 0)], True),
                                                  ([(7, 0)], False), ([(8, 6), (7, 5)], False)])
def test_cuda_trains_in_bf16_from_ampere_on(monkeypatch, capabilities, native):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(capabilities))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: capabilities[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"card{i}")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    auto = B.get_backend("auto").choose_precision()
    oldest = min(capabilities)
    assert auto.precision == ("bf16" if native else "fp32")
    assert f"CUDA compute capability {oldest[0]}.{oldest[1]} (card{capabilities.index(oldest)})" in auto.reason
    assert ("bf16 would be emulated" in auto.reason) is not native


def test_the_npu_trains_in_bf16_where_it_has_it(fake_npu, monkeypatch):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "8")
    npu = B.get_backend("npu")
    assert npu.choose_precision() == B.PrecisionChoice("bf16", True,
                                                       "bf16 (auto): the NPU (Ascend910B3) computes bf16 natively")
    monkeypatch.setenv("HYPORT_FAKE_NPU_BF16", "0")
    monkeypatch.setenv("HYPORT_FAKE_NPU_NAME", "Ascend310P3")
    auto = npu.choose_precision()
    assert (auto.precision, auto.reason) == ("fp32", "float32 (auto): the NPU (Ascend310P3) has no bf16 "
                                                     "(a 310P inference card?)")
