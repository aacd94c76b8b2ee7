# hyport-scan: ignore-file  (the backend seam is where torch.cuda and "nccl" belong)
"""The backend seam: every device question hyport asks is answered here.

Nothing else in hyport imports ``torch_npu`` or calls ``torch.cuda`` directly (a test
checks it): the torch_npu module and its ``npu_fusion_attention`` op come from
:func:`import_torch_npu` and :func:`npu_fusion_attention_op`. Each backend is a small
class with the same methods, so stage code asks ``backend.device(i)`` or
``backend.memory_stats()`` and never branches on the kind. Detection order is npu, cuda,
cpu (:func:`cuda_available` says why CUDA is doubted). :meth:`Backend.auto_precision` says
whether the device computes bf16 natively, from what it reports (CPU flags, CUDA capability).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from typing import Optional

from hyport_lib.utils.imports import try_import

DEFAULT_CPU_CARDS = 2
#: Where Linux lists the CPU's flags; read bounded (the first processor's block names them).
CPUINFO_PATH = "/proc/cpuinfo"
CPUINFO_READ_LIMIT = 64 * 1024
#: x86 flags that make bf16 native for torch on the CPU (oneDNN's AMX tiles, AVX512-BF16).
NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
#: CUDA computes bf16 natively from compute capability 8.0 (Ampere) on.
CUDA_NATIVE_BF16_CAPABILITY = (8, 0)
#: Emulated bf16 against float32 on a CPU without either flag: SmolLM2-135M, one forward and
#: backward pass on 128 tokens at 1 thread, 57 s against 4.3 s (issue 41, an AVX2 host).
CPU_EMULATED_BF16_SLOWDOWN = "about 13x"


@dataclass(frozen=True)
class PrecisionChoice:
    """A run's precision on a device (``auto`` resolved) and why, in words a reader sees."""

    precision: str  # "bf16" or "fp32"
    native_bf16: bool  # the device computes bf16 in hardware (whatever was chosen)
    reason: str


@dataclass(frozen=True)
class MemoryStats:
    """Device memory of one card in bytes. On CPU: process RSS (peak = max RSS)."""

    allocated: int
    reserved: int
    peak: int
    source: str  # "device" or "process-rss"


class Backend:
    """Common interface; one subclass per device kind."""

    kind: str = "cpu"
    dist_backend: str = "gloo"
    visible_devices_var: Optional[str] = None
    #: True when this backend's numbers come from a real accelerator.
    is_accelerator: bool = False
    #: What bf16 costs where the device emulates it (None: no bf16 at all there).
    emulated_bf16: Optional[str] = None

    def __init__(self, num_cards: Optional[int] = None):
        self._requested_cards = num_cards

    # --- identity -----------------------------------------------------------------
    def device(self, index: int = 0) -> str:
        return f"{self.kind}:{index}"

    def torch_device(self, index: int = 0):
        import torch

        return torch.device(self.device(index))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, num_cards={self.num_cards()})"

    # --- per-card operations (overridden) ------------------------------------------
    def num_cards(self) -> int:
        raise NotImplementedError

    def set_device(self, index: int) -> None:
        """Make card ``index`` current for this process (no-op on CPU)."""

    def synchronize(self, index: Optional[int] = None) -> None:
        """Wait for queued device work (no-op on CPU)."""

    def supports_bf16(self) -> bool:
        raise NotImplementedError

    def native_bf16(self) -> tuple[bool, str]:
        """``(True, why)`` where the device computes bf16 in hardware; ``(False, why not)``."""
        raise NotImplementedError

    def choose_precision(self, asked: str = "auto") -> PrecisionChoice:
        """``auto``: bf16 where the device computes it natively, float32 elsewhere (emulated bf16
        is correct but far slower); an explicit precision is kept, its cost said."""
        native, why = self.native_bf16()
        if asked == "auto" and native:
            return PrecisionChoice("bf16", True, f"bf16 (auto): {why}")
        if asked == "auto":
            cost = f"; bf16 would be {self.emulated_bf16}" if self.emulated_bf16 else ""
            return PrecisionChoice("fp32", False, f"float32 (auto): {why}{cost}")
        if asked == "bf16":
            cost = f"; bf16 is {self.emulated_bf16}" if not native and self.emulated_bf16 else ""
            return PrecisionChoice("bf16", native, f"bf16, as asked (precision='bf16'): {why}{cost}")
        return PrecisionChoice(asked, native, f"{asked}, as asked (precision={asked!r})")

    def device_name(self, index: int = 0) -> Optional[str]:
        """The card's product name as the runtime reports it; None when unknown."""
        return None

    def memory_stats(self, index: int = 0) -> MemoryStats:
        raise NotImplementedError

    def reset_peak_memory(self, index: int = 0) -> None:
        """Start a new peak-memory window (not possible for RSS on CPU)."""

    def visible_devices_env(self, indices: list[int]) -> dict[str, str]:
        """Environment that pins a fresh child process to ``indices``: comma-separated without
        spaces (on Ascend a space silently truncates the list)."""
        if self.visible_devices_var is None:
            return {}
        return {self.visible_devices_var: ",".join(str(int(i)) for i in indices)}


class CpuBackend(Backend):
    """CPU: "cards" are worker processes; their number is a parameter (default 2)."""

    kind = "cpu"
    dist_backend = "gloo"
    emulated_bf16 = f"emulated in software, {CPU_EMULATED_BF16_SLOWDOWN} slower than float32"

    def device(self, index: int = 0) -> str:
        return "cpu"

    def num_cards(self) -> int:
        return int(self._requested_cards or DEFAULT_CPU_CARDS)

    def supports_bf16(self) -> bool:
        return True  # where the CPU lacks it, emulated in software by torch: slow but correct

    def native_bf16(self) -> tuple[bool, str]:
        flags, error = cpu_flags()
        if flags is None:
            return False, f"this CPU's flags cannot be read ({error}): no sign of AMX or AVX512-BF16"
        found = [f for f in NATIVE_BF16_CPU_FLAGS if f in flags]
        if found:
            return True, f"this CPU computes bf16 natively ({', '.join(found)} in {CPUINFO_PATH})"
        return False, f"this CPU has no native bf16 (no AMX, no AVX512-BF16 in {CPUINFO_PATH})"

    def memory_stats(self, index: int = 0) -> MemoryStats:
        import psutil

        rss = psutil.Process().memory_info().rss
        return MemoryStats(allocated=rss, reserved=rss, peak=max(peak_rss_bytes(), rss), source="process-rss")


class _DeviceModuleBackend(Backend):
    """Shared body of the CUDA and NPU backends: both expose a torch.cuda-style module."""

    is_accelerator = True

    def _module(self):
        raise NotImplementedError

    def num_cards(self) -> int:
        available = int(self._module().device_count())
        if self._requested_cards:
            return min(int(self._requested_cards), available)
        return available

    def set_device(self, index: int) -> None:
        self._module().set_device(index)

    def synchronize(self, index: Optional[int] = None) -> None:
        if index is None:
            self._module().synchronize()
        else:
            self._module().synchronize(index)

    def memory_stats(self, index: int = 0) -> MemoryStats:
        mod = self._module()
        return MemoryStats(
            allocated=int(mod.memory_allocated(index)),
            reserved=int(mod.memory_reserved(index)),
            peak=int(mod.max_memory_allocated(index)),
            source="device",
        )

    def reset_peak_memory(self, index: int = 0) -> None:
        self._module().reset_peak_memory_stats(index)

    def device_name(self, index: int = 0) -> Optional[str]:
        getter = getattr(self._module(), "get_device_name", None)
        return str(getter(index)) if getter is not None else None


class CudaBackend(_DeviceModuleBackend):
    kind = "cuda"
    dist_backend = "nccl"
    visible_devices_var = "CUDA_VISIBLE_DEVICES"
    emulated_bf16 = "emulated, slower than float32"

    def _module(self):
        import torch

        return torch.cuda

    def supports_bf16(self) -> bool:
        return bool(self._module().is_bf16_supported())

    def native_bf16(self) -> tuple[bool, str]:
        # The oldest card decides: every rank trains in the same precision.
        capability, index = min((tuple(self._module().get_device_capability(i)), i)
                                for i in range(max(1, self.num_cards())))
        shown = f"CUDA compute capability {capability[0]}.{capability[1]} ({self.device_name(index)})"
        if capability >= CUDA_NATIVE_BF16_CAPABILITY:
            return True, f"{shown} computes bf16 natively (Ampere and later)"
        return False, f"{shown} has no native bf16 (it came with 8.0, Ampere)"


class NpuBackend(_DeviceModuleBackend):
    kind = "npu"
    dist_backend = "hccl"
    visible_devices_var = "ASCEND_RT_VISIBLE_DEVICES"

    def _module(self):
        torch_npu, error = import_torch_npu()
        if torch_npu is None:
            raise RuntimeError(f"torch_npu is not usable: {error or 'not installed'}")
        return torch_npu.npu

    def supports_bf16(self) -> bool:
        mod = self._module()
        check = getattr(mod, "is_bf16_supported", None)
        # Every Atlas training card (910 family) has bf16; 310P inference cards do not.
        return bool(check()) if check is not None else True

    def native_bf16(self) -> tuple[bool, str]:
        name = self.device_name(0)
        if self.supports_bf16():
            return True, f"the NPU ({name}) computes bf16 natively"
        return False, f"the NPU ({name}) has no bf16 (a 310P inference card?)"


_BACKENDS = {"npu": NpuBackend, "cuda": CudaBackend, "cpu": CpuBackend}


def import_torch_npu():
    """``(torch_npu, None)``, ``(None, None)`` when not installed, or ``(None, error)``
    when installed but broken (e.g. CANN not sourced: ``libhccl.so`` missing). Cached."""
    return try_import("torch_npu")


def npu_fusion_attention_op():
    """``torch_npu.npu_fusion_attention``; RuntimeError naming the reason when unusable."""
    torch_npu, error = import_torch_npu()
    if torch_npu is None:
        raise RuntimeError(f"torch_npu.npu_fusion_attention is not available here: "
                           f"{error or 'torch_npu is not installed'}")
    return torch_npu.npu_fusion_attention


def npu_available() -> bool:
    """An NPU is present and torch_npu works."""
    torch_npu, _ = import_torch_npu()
    if torch_npu is None:
        return False
    try:
        return bool(torch_npu.npu.is_available())
    except RuntimeError:
        return False


def cuda_available() -> bool:
    """A real CUDA (or ROCm) device is present: a CUDA/HIP build whose ``torch.cuda`` torch_npu
    has not patched (``transfer_to_npu`` redirects ``torch.cuda.is_available()`` to the NPU)."""
    torch, _ = try_import("torch")
    if torch is None:
        return False
    if not (getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)):
        return False
    if transfer_to_npu_active():
        return False
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except RuntimeError:
        return False


def transfer_to_npu_active() -> bool:
    """True when ``torch.cuda`` has been rewritten by torch_npu's transfer_to_npu."""
    if "torch_npu.contrib.transfer_to_npu" in sys.modules:
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    fn = getattr(torch.cuda, "is_available", None)
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("torch_npu")


def detect_kind() -> str:
    if npu_available():
        return "npu"
    if cuda_available():
        return "cuda"
    return "cpu"


def get_backend(device: str = "auto", num_cards: Optional[int] = None) -> Backend:
    """Backend for ``device``: ``auto`` detects; an explicit kind (``npu``, ``cuda``,
    ``cpu``) is honoured or a RuntimeError says why it is not usable here. ``num_cards``
    caps the visible cards; on CPU it is the number of worker processes (default 2)."""
    device = (device or "auto").lower().strip()
    if device.split(":")[0] not in (*_BACKENDS, "auto"):
        raise ValueError(f"device={device!r}: expected one of auto, npu, cuda, cpu")
    kind = detect_kind() if device == "auto" else device.split(":")[0]
    if kind == "npu" and not npu_available():
        reason = import_torch_npu()[1] or "torch_npu is not installed or no NPU is visible"
        raise RuntimeError(f"device='npu' requested but NPU is not usable: {reason}")
    if kind == "cuda" and not cuda_available():
        hint = " (torch.cuda is redirected by transfer_to_npu)" if transfer_to_npu_active() else ""
        raise RuntimeError(f"device='cuda' requested but no CUDA device is usable{hint}")
    return _BACKENDS[kind](num_cards=num_cards)


def cpu_flags(path: Optional[str] = None) -> tuple[Optional[frozenset], Optional[str]]:
    """``(flags of the first processor, None)``, or ``(None, why)`` where they cannot be read
    (no ``/proc/cpuinfo`` off Linux, no ``flags`` line on ARM)."""
    path = path or CPUINFO_PATH
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(CPUINFO_READ_LIMIT)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split()), None
    return None, f"{path} has no flags line in its first {CPUINFO_READ_LIMIT // 1024} KiB"


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes (``ru_maxrss``: KiB on Linux, bytes on
    macOS); ``RUSAGE_SELF``, as ``RUSAGE_CHILDREN`` is the maximum over every child reaped."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
