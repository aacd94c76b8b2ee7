"""What device discovery (:mod:`.probe`) finds and stage 01 records: a card and a process
holding one."""

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
    """One card (on Ascend: one chip, the unit a visible-devices index selects)."""

    #: The visible-devices index: the chip's position in ``npu-smi info`` (or ``nvidia-smi``) order.
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
