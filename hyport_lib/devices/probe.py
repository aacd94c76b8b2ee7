"""Which cards this host has, their memory, and which processes hold them.

On Ascend the facts come from ``npu-smi info`` (the only place that lists other users'
processes), on CUDA from ``nvidia-smi``, on CPU the "cards" are the worker processes
hyport would start; when the tool is missing or fails, from torch's device count.

Card indices are logical: the position in the tool's listing, i.e. the number to put in
``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES`` for a child process (on CUDA that
is nvidia-smi's PCI order; set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for the CUDA runtime to
agree). On Ascend a card is a chip: the unit ``ASCEND_RT_VISIBLE_DEVICES`` selects.

The ``npu-smi info`` table changes between releases and products
(``docs/ascend_field_notes.md``; a sample of each layout in ``tests/data/npu_smi/``: 24.x,
25.x, Atlas A3, 310P, Ascend 950, a container's pid column), so its parser reads cells
between ``|`` instead of fixed columns, and a row's content says what it is.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.utils.typed_records import fields_of
from hyport_lib.utils.wording import counted

NVIDIA_GPU_QUERY = ("--query-gpu=index,uuid,name,memory.used,memory.total",
                    "--format=csv,noheader,nounits")
NVIDIA_APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                     "--format=csv,noheader,nounits")
NVIDIA_DRIVER_QUERY = ("--query-gpu=driver_version", "--format=csv,noheader")


@dataclass(frozen=True)
class DeviceProcess:
    """A process holding memory on a card: ``pid`` as seen from here (npu-smi's ``Process id
    in container`` when printed), ``host_pid`` the host's when it differs (in a container)."""

    pid: int
    name: str
    memory_mb: Optional[int] = None
    host_pid: Optional[int] = None

    def describe(self) -> str:
        name = self.name or "?"
        mem = f" {self.memory_mb} MB" if self.memory_mb is not None else ""
        return f"pid {self.pid} {name}{mem}"


@dataclass
class DeviceInfo:
    """One card (on Ascend: one chip, the unit a visible-devices index selects)."""

    index: int
    npu_id: Optional[int]  # the NPU number npu-smi prints (GPU index on CUDA); None on CPU
    chip_id: Optional[int]  # within the NPU: 0, or 0/1 on Atlas A3 and 310P Duo
    name: str
    health: Optional[str]
    hbm_used_mb: Optional[int]  # None where the card has no HBM (310P)
    hbm_total_mb: Optional[int]
    processes: list[DeviceProcess] = field(default_factory=list)
    #: The "Memory-Usage" column (DDR); on 310P the card's device memory.
    memory_used_mb: Optional[int] = None
    memory_total_mb: Optional[int] = None
    #: ``Chip Phy-ID`` (25.x, A3) or ``Chip Device`` (310P) when printed.
    phy_id: Optional[int] = None
    bus_id: Optional[str] = None
    power_w: Optional[float] = None
    temp_c: Optional[int] = None
    aicore_pct: Optional[int] = None
    source: str = ""  # npu-smi, nvidia-smi, torch or cpu

    @property
    def busy(self) -> bool:
        return bool(self.processes)

    @property
    def used_mb(self) -> Optional[int]:
        """Device memory in use: HBM where there is HBM, otherwise Memory-Usage."""
        return self.hbm_used_mb if self.hbm_total_mb is not None else self.memory_used_mb

    @property
    def total_mb(self) -> Optional[int]:
        return self.hbm_total_mb if self.hbm_total_mb is not None else self.memory_total_mb

    def to_dict(self) -> dict:
        return {**fields_of(self), "busy": self.busy}


@dataclass
class DeviceListing:
    """``source``: ``npu-smi``, ``nvidia-smi``, ``torch`` (the tool is missing or failed:
    ``error`` says why) or ``cpu``; ``raw``: the tool's output, for a bug report;
    ``distrust``: why the listing cannot be trusted (it disagrees with the runtime's count)."""

    devices: list[DeviceInfo] = field(default_factory=list)
    source: str = ""
    error: Optional[str] = None
    driver_version: Optional[str] = None
    processes_known: bool = True
    raw: Optional[str] = None
    distrust: Optional[str] = None


def probe_devices(backend) -> DeviceListing:
    if backend.kind == "npu":
        return _probe_npu(backend)
    if backend.kind == "cuda":
        return _probe_cuda(backend)
    return DeviceListing(devices=[
        DeviceInfo(index=i, npu_id=None, chip_id=None, name="CPU worker process", health=None,
                   hbm_used_mb=None, hbm_total_mb=None, source="cpu")
        for i in range(backend.num_cards())], source="cpu")


# --- npu-smi ---------------------------------------------------------------------------
_VERSION_RE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_IDLE_RE = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_PAIR_RE = re.compile(r"(\d+)\s*/\s*(\d+)")
#: The process table's columns, by the start of their header.
_PROCESS_COLUMNS = (("container_pid", "Process id in container"), ("pid", "Process id"),
                    ("name", "Process name"), ("memory", "Process memory"))
_BUS_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


class NpuSmiError(RuntimeError):
    """npu-smi could not be asked: the listing falls back to torch's count."""


@dataclass
class NpuSmiInfo:
    """One ``npu-smi info`` table: one device per chip in listing order, and
    ``unmatched_processes``: ``(npu_id, chip_id, process)`` rows of chips not in the table."""

    tool_version: Optional[str] = None
    driver_version: Optional[str] = None
    devices: list[DeviceInfo] = field(default_factory=list)
    idle_npus: list[int] = field(default_factory=list)
    unmatched_processes: list[tuple[int, Optional[int], DeviceProcess]] = field(default_factory=list)


def _cells(line: str) -> Optional[list[str]]:
    text = line.strip()
    if not text.startswith("|"):
        return None
    text = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
    return [c.strip() for c in text.split("|")]


def _int(token: Optional[str]) -> Optional[int]:
    return int(token) if token is not None and token.strip().isdigit() else None


def _float(token: Optional[str]) -> Optional[float]:
    try:
        return float(token) if token is not None else None
    except ValueError:  # "-" (second chip on A3) or "NA"
        return None


def _first_row_metrics(cell: str) -> tuple[Optional[float], Optional[int]]:
    """Power and temperature from ``101.8  43  0 / 0`` (power may be ``-``)."""
    tokens = cell.split()
    power = _float(tokens[0]) if tokens else None
    temp = _int(tokens[1]) if len(tokens) > 1 else None
    return power, temp


def _second_row_metrics(cell: str) -> dict:
    """AICore %, memory and HBM from ``0  0 / 0  3318 / 65536`` (310P: one pair)."""
    tokens = cell.split()
    pairs = [(int(a), int(b)) for a, b in _PAIR_RE.findall(cell)]
    memory = pairs[0] if pairs else (None, None)
    hbm = pairs[-1] if len(pairs) >= 2 else (None, None)  # the last pair is HBM; 310P prints none
    return {"aicore_pct": _int(tokens[0]) if tokens else None, "memory_used_mb": memory[0],
            "memory_total_mb": memory[1], "hbm_used_mb": hbm[0], "hbm_total_mb": hbm[1]}


class _Parser:
    def __init__(self):
        self.info = NpuSmiInfo()
        self.section: Optional[str] = None  # "chips" | "procs"
        self.per_field_layout = False  # Ascend 950: "| NPU ID | Name | Health | ..."
        self.pending: Optional[dict] = None
        self.proc_columns: dict[str, int] = {}
        self.raw_processes: list[tuple[int, Optional[int], DeviceProcess]] = []

    def feed(self, line: str) -> None:
        match = _VERSION_RE.search(line)
        if match:
            self.info.tool_version, self.info.driver_version = match.group(1), match.group(2)
            return
        cells = _cells(line)
        if not cells:
            return
        joined = " ".join(cells)
        idle = _IDLE_RE.search(joined)
        if idle:
            self.info.idle_npus.append(int(idle.group(1)))
            return
        if "Process id" in joined and "Process name" in joined:
            self._process_header(cells)
        elif "Health" in joined and "Name" in joined:
            self.section = "chips"
            self.per_field_layout = cells[0].replace(" ", "") == "NPUID"
        elif self.section == "chips" and (cells[0].startswith("Chip") or (
                "Bus-Id" in joined and not any(c[:1].isdigit() for c in cells))):
            return  # second header line ("Chip", "Chip  Phy-ID", "Chip  Device"): no data
        elif self.section == "chips":
            self._chip_row(cells)
        elif self.section == "procs":
            self._process_row(cells)

    # --- chip table -----------------------------------------------------------------
    def _chip_row(self, cells: list[str]) -> None:
        if self.per_field_layout:
            return self._chip_row_per_field(cells)
        if len(cells) < 3:
            return
        tokens = cells[0].split()
        if not tokens or not tokens[0].isdigit():
            return
        if len(tokens) >= 2 and not all(t.isdigit() for t in tokens):
            power, temp = _first_row_metrics(cells[2])
            self.pending = {"npu_id": int(tokens[0]), "name": " ".join(tokens[1:]),
                            "health": cells[1] or None, "power_w": power, "temp_c": temp}
        elif self.pending is not None:
            chip_id = int(tokens[0])
            phy_id = int(tokens[1]) if len(tokens) > 1 else None
            self._add_chip(chip_id, phy_id, cells[1], cells[2])

    def _chip_row_per_field(self, cells: list[str]) -> None:
        if len(cells) < 4:
            return
        if cells[0].isdigit():
            power, temp = _first_row_metrics(cells[3])
            self.pending = {"npu_id": int(cells[0]), "name": cells[1], "health": cells[2] or None,
                            "power_w": power, "temp_c": temp}
        elif not cells[0] and self.pending is not None:
            self._add_chip(0, None, cells[2], cells[3])

    def _add_chip(self, chip_id: int, phy_id: Optional[int], bus: str, metrics: str) -> None:
        first = self.pending
        bus = bus.strip()
        self.info.devices.append(DeviceInfo(
            index=len(self.info.devices), npu_id=first["npu_id"], chip_id=chip_id,
            name=first["name"], health=first["health"], phy_id=phy_id,
            bus_id=bus if _BUS_RE.match(bus) else None,
            power_w=first["power_w"], temp_c=first["temp_c"], source="npu-smi",
            **_second_row_metrics(metrics)))
        # Keep ``pending``: A3 repeats the first row for its second chip, but a layout
        # that printed it once for several chips must still give each chip a name.

    # --- process table --------------------------------------------------------------
    def _process_header(self, cells: list[str]) -> None:
        self.section = "procs"
        self.proc_columns = {}
        for i, cell in enumerate(cells):  # "Process id in container" before "Process id"
            key = next((k for k, head in _PROCESS_COLUMNS if cell.startswith(head)), None)
            if key:
                self.proc_columns[key] = i

    def _process_row(self, cells: list[str]) -> None:
        cols = self.proc_columns
        pid_i, name_i, mem_i = cols.get("pid", 1), cols.get("name", 2), cols.get("memory", 3)
        if len(cells) <= max(pid_i, name_i, mem_i):
            return
        tokens = cells[0].split()
        host_pid = _int(cells[pid_i])
        if not tokens or not tokens[0].isdigit() or host_pid is None:
            return
        npu_id = int(tokens[0])
        chip_id = int(tokens[1]) if len(tokens) > 1 and tokens[1].isdigit() else None
        container_i = cols.get("container_pid", len(cells))
        container_pid = _int(cells[container_i]) if container_i < len(cells) else None
        process = DeviceProcess(
            pid=container_pid if container_pid is not None else host_pid,
            name=cells[name_i], memory_mb=_int(cells[mem_i]),
            host_pid=host_pid if container_pid is not None else None)
        self.raw_processes.append((npu_id, chip_id, process))

    # --- result -----------------------------------------------------------------------
    def finish(self) -> NpuSmiInfo:
        by_chip = {(d.npu_id, d.chip_id): d for d in self.info.devices}
        by_npu: dict[int, list[DeviceInfo]] = {}
        for device in self.info.devices:
            by_npu.setdefault(device.npu_id, []).append(device)
        for npu_id, chip_id, process in self.raw_processes:
            device = by_chip.get((npu_id, chip_id if chip_id is not None else 0))
            if device is None and len(by_npu.get(npu_id, [])) == 1:
                device = by_npu[npu_id][0]
            if device is None:
                self.info.unmatched_processes.append((npu_id, chip_id, process))
            else:
                device.processes.append(process)
        return self.info


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Lines that fit no known row are ignored."""
    parser = _Parser()
    for line in text.splitlines():
        parser.feed(line)
    return parser.finish()


def _npu_smi_info(timeout_s: float = 15.0) -> str:
    """``npu-smi info``'s stdout; NpuSmiError when it is not on PATH, exits non-zero or does
    not answer (npu-smi hangs when the driver is wedged)."""
    exe = shutil.which("npu-smi")
    if exe is None:
        raise NpuSmiError("npu-smi not found on PATH (mount it into the container: "
                          "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi)")
    try:
        proc = subprocess.run([exe, "info"], capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise NpuSmiError(f"npu-smi info did not answer within {timeout_s:.0f} s") from exc
    # A driver in trouble prints stray bytes: decode what can be, never crash on it.
    stdout = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        detail = (proc.stderr.decode("utf-8", errors="replace") or stdout).strip().splitlines()
        raise NpuSmiError(f"npu-smi info exited {proc.returncode}: {detail[-1] if detail else 'no output'}")
    return stdout


def _probe_npu(backend) -> DeviceListing:
    try:
        text = _npu_smi_info()
    except NpuSmiError as exc:
        return _fallback(backend, str(exc))
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
        listing.distrust = (f"npu-smi lists {counted(len(info.devices), 'card')} but torch_npu sees "
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
    """:data:`NVIDIA_APPS_QUERY`'s output: gpu uuid -> processes."""
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
    try:  # each query bounded: nvidia-smi hangs when the driver is wedged
        gpus, apps, driver = [subprocess.run([exe, *query], capture_output=True, text=True, timeout=15)
                              for query in (NVIDIA_GPU_QUERY, NVIDIA_APPS_QUERY, NVIDIA_DRIVER_QUERY)]
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
