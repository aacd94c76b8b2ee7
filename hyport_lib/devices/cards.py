"""What device discovery finds: a card (:class:`DeviceInfo`) and a process holding one
(:class:`DeviceProcess`), apart from the modules that fill them so that none imports another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.utils.typed_records import fields_of


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
    """One card (on Ascend: one chip, the unit a visible-devices index selects).

    Attributes:
        index: logical card index, as used with the visible-devices variable: the
            position of the chip in ``npu-smi info`` (or ``nvidia-smi``) order.
        npu_id: the NPU number npu-smi prints (GPU index on CUDA); None on CPU.
        chip_id: chip number within the NPU (0, or 0/1 on Atlas A3 and 310P Duo).
        hbm_used_mb / hbm_total_mb: HBM use; None where the card has no HBM (310P).
        memory_used_mb / memory_total_mb: the "Memory-Usage" column (DDR); on 310P
            this is the card's device memory.
        phy_id: physical id (``Chip Phy-ID``, 25.x/A3) or device id (``Chip Device``,
            310P) when printed.
        source: where the facts came from: npu-smi, nvidia-smi, torch, cpu.
    """

    index: int
    npu_id: Optional[int]
    chip_id: Optional[int]
    name: str
    health: Optional[str]
    hbm_used_mb: Optional[int]
    hbm_total_mb: Optional[int]
    processes: list[DeviceProcess] = field(default_factory=list)
    memory_used_mb: Optional[int] = None
    memory_total_mb: Optional[int] = None
    phy_id: Optional[int] = None
    bus_id: Optional[str] = None
    power_w: Optional[float] = None
    temp_c: Optional[int] = None
    aicore_pct: Optional[int] = None
    source: str = ""

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
