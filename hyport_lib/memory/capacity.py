"""What a card and a host hold: the card's memory from its runtime where it can be read
(``torch.npu`` / ``torch.cuda``), else from the ``card_memory_gib`` parameter (a profile
sets it: 64 for a 910B3), else unknown; the host's RAM capped by the container's limit.
"""

from __future__ import annotations

from typing import Optional

from hyport_lib.backend import Backend
from hyport_lib.devices.out_of_memory import memory_counters
from hyport_lib.memory.fit import Capacity
from hyport_lib.memory.shape import format_gib


def host_ram() -> tuple[int, str]:
    """``(bytes, where the figure comes from)``: the RAM this process may use: the lowest
    memory limit of its cgroup and their parents (a container's, a job's) where lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    limit = memory_counters().limit_bytes
    if limit is not None and limit < total:
        return int(limit), "the memory cgroup's limit"
    return total, "the host's RAM"


def card_memory(backend: Optional[Backend], card_memory_gib: Optional[float]) -> tuple[Optional[int], str]:
    """``(bytes or None, source)``. The runtime's figure wins over the parameter; where both
    are known and differ, the source says so."""
    given = int(card_memory_gib * 2 ** 30) if card_memory_gib else None
    read = None
    if backend is not None and backend.is_accelerator:
        read = backend.card_memory_bytes(0)
    if read is not None:
        name = backend.device_name(0) or backend.kind
        source = f"{name}, as {backend.kind} reports it"
        if given is not None and abs(given - read) > 2 ** 30:
            source += f"; card_memory_gib={card_memory_gib:g} set aside"
        return read, source
    if given is not None:
        return given, f"card_memory_gib={card_memory_gib:g}"
    return None, "unknown: no card to ask, and no card_memory_gib"


def capacity(backend: Optional[Backend], card_memory_gib: Optional[float] = None,
             host_ram_gib: Optional[float] = None) -> Capacity:
    """``host_ram_gib``: the RAM of a host planned for from another (``hyport plan``)."""
    card, card_source = card_memory(backend, card_memory_gib)
    if host_ram_gib:
        host, host_source = int(host_ram_gib * 2 ** 30), f"host_ram_gib={host_ram_gib:g}"
    else:
        host, host_source = host_ram()
    return Capacity(card, card_source, host, host_source)


def describe(found: Capacity) -> str:
    """One line for stage 01: ``card: 64 GiB (Ascend910B3, as npu reports it); host: ...``."""
    card = (f"{format_gib(found.card_bytes)} per card ({found.card_source})" if found.card_bytes
            else f"card memory {found.card_source}")
    return f"{card}; host RAM {format_gib(found.host_bytes)} ({found.host_source})"
