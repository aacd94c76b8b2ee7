"""Which cards this host has, their memory, and which processes hold them.

On Ascend the facts come from ``npu-smi info`` (the only place that lists other
users' processes), on CUDA from ``nvidia-smi --query-*``, on CPU the "cards" are the
worker processes hyport would start. When the tool is missing or fails, the listing
falls back to the device count torch reports, and says so in ``error``.

Card indices are logical: the position in the tool's listing, i.e. the number to put
in ``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES`` for a child process. (On
CUDA that is nvidia-smi's PCI order; set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for the
CUDA runtime to agree.)
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.devices.npu_smi import NpuSmiError, parse_npu_smi_info, run_npu_smi
from hyport_lib.devices.cards import DeviceInfo, DeviceProcess

NVIDIA_GPU_QUERY = ("--query-gpu=index,uuid,name,memory.used,memory.total",
                    "--format=csv,noheader,nounits")
NVIDIA_APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                     "--format=csv,noheader,nounits")


@dataclass
class DeviceListing:
    """Cards plus where they came from (``source``: ``npu-smi``, ``nvidia-smi``, ``torch``
    when the tool is missing or failed, ``cpu``); ``error``: why the preferred tool could not
    be used; ``raw``: the tool's output, for a bug report; ``distrust``: why the listing
    cannot be trusted (it disagrees with the runtime's card count)."""

    devices: list[DeviceInfo] = field(default_factory=list)
    source: str = ""
    error: Optional[str] = None
    driver_version: Optional[str] = None
    processes_known: bool = True
    raw: Optional[str] = None
    distrust: Optional[str] = None


def probe_devices(backend) -> DeviceListing:
    """List the cards of ``backend`` (a :class:`hyport_lib.backend.Backend`)."""
    if backend.kind == "npu":
        return _probe_npu(backend)
    if backend.kind == "cuda":
        return _probe_cuda(backend)
    return DeviceListing(devices=[
        DeviceInfo(index=i, npu_id=None, chip_id=None, name="CPU worker process", health=None,
                   hbm_used_mb=None, hbm_total_mb=None, source="cpu")
        for i in range(backend.num_cards())], source="cpu")


# --- Ascend ---------------------------------------------------------------------------
def _probe_npu(backend) -> DeviceListing:
    try:
        text = run_npu_smi(("info",))
    except NpuSmiError as exc:
        return _fallback(backend, f"{exc}")
    if text is None:
        return _fallback(backend, "npu-smi not found on PATH (mount it into the container: "
                                  "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi)")
    info = parse_npu_smi_info(text)
    if not info.devices:
        listing = _fallback(backend, "npu-smi info printed no chip table that hyport recognises")
        listing.raw = text  # what it did print, for the bug report
        return listing
    error = None
    if info.unmatched_processes:
        pids = ", ".join(f"{p.pid} (NPU {n} chip {c})" for n, c, p in info.unmatched_processes)
        error = f"processes on chips missing from the table: {pids}"
    listing = DeviceListing(devices=info.devices, source="npu-smi", error=error,
                            driver_version=info.driver_version, raw=text)
    runtime = _runtime_cards(backend)
    # Compared only with every card visible: a visible-devices list shows the runtime fewer.
    if runtime is not None and not os.environ.get(backend.visible_devices_var or "") \
            and runtime != len(info.devices):
        listing.distrust = (f"npu-smi lists {len(info.devices)} card(s) but torch_npu sees "
                            f"{runtime}: the listing cannot be trusted (its raw output is kept "
                            "in the report)")
    return listing


# --- CUDA -----------------------------------------------------------------------------
def parse_nvidia_smi_gpus(text: str) -> dict[str, DeviceInfo]:
    """``{gpu uuid: card}`` in listing order from :data:`NVIDIA_GPU_QUERY`'s output (the
    uuid maps compute apps to cards)."""
    devices: dict[str, DeviceInfo] = {}
    for row in csv.reader(io.StringIO(text)):
        row = [c.strip() for c in row]
        if len(row) < 5 or not row[0].isdigit():
            continue
        devices[row[1]] = DeviceInfo(
            index=len(devices), npu_id=int(row[0]), chip_id=None, name=row[2], health=None,
            hbm_used_mb=_mb(row[3]), hbm_total_mb=_mb(row[4]), source="nvidia-smi")
    return devices


def parse_nvidia_smi_apps(text: str) -> dict[str, list[DeviceProcess]]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory``: uuid -> processes."""
    by_uuid: dict[str, list[DeviceProcess]] = {}
    for row in csv.reader(io.StringIO(text)):
        row = [c.strip() for c in row]
        if len(row) < 4 or not row[1].isdigit():
            continue
        by_uuid.setdefault(row[0], []).append(
            DeviceProcess(pid=int(row[1]), name=row[2], memory_mb=_mb(row[3])))
    return by_uuid


def _mb(token: str) -> Optional[int]:
    try:
        return int(float(token))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _probe_cuda(backend) -> DeviceListing:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return _fallback(backend, "nvidia-smi not found on PATH")
    try:
        gpus = subprocess.run([exe, *NVIDIA_GPU_QUERY], capture_output=True, text=True, timeout=15)
        apps = subprocess.run([exe, *NVIDIA_APPS_QUERY], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return _fallback(backend, "nvidia-smi did not answer within 15 s")
    if gpus.returncode != 0:
        return _fallback(backend, f"nvidia-smi exited {gpus.returncode}: {gpus.stderr.strip()[:200]}")
    devices = parse_nvidia_smi_gpus(gpus.stdout)
    if not devices:
        return _fallback(backend, "nvidia-smi listed no GPU")
    by_uuid = parse_nvidia_smi_apps(apps.stdout) if apps.returncode == 0 else {}
    for uuid, device in devices.items():
        device.processes = by_uuid.get(uuid, [])
    driver = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, timeout=15)
    lines = driver.stdout.strip().splitlines() if driver.returncode == 0 else []
    version = lines[0] if lines else None
    return DeviceListing(devices=list(devices.values()), source="nvidia-smi", driver_version=version,
                         error=None if apps.returncode == 0 else "nvidia-smi could not list processes",
                         processes_known=apps.returncode == 0)


# --- fallback ---------------------------------------------------------------------------
def _fallback(backend, error: str) -> DeviceListing:
    """Cards as torch counts them; names where the device module gives them."""
    devices = []
    for i in range(backend.num_cards()):
        devices.append(DeviceInfo(index=i, npu_id=None, chip_id=None, name=_device_name(backend, i),
                                  health=None, hbm_used_mb=None, hbm_total_mb=None, source="torch"))
    return DeviceListing(devices=devices, source="torch", error=error, processes_known=False)


def _runtime_cards(backend) -> Optional[int]:
    """Every card the runtime sees (not capped by a requested card count)."""
    try:
        return int(type(backend)().num_cards())
    except (RuntimeError, ValueError):
        return None


def _device_name(backend, index: int) -> str:
    try:
        return backend.device_name(index) or backend.kind
    except (RuntimeError, AssertionError) as exc:
        return f"{backend.kind} (name unavailable: {type(exc).__name__})"
