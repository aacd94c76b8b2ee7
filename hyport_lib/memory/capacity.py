"""What a card and a host hold: the card's memory from the device tool (``npu-smi``,
``nvidia-smi``) where it lists it, else from the ``card_memory_gib`` parameter (a profile
sets it: 64 for a 910B3), else unknown; the host's RAM capped by its memory cgroup's limit.
"""

from __future__ import annotations

from typing import Optional

from hyport_lib.backend import Backend
from hyport_lib.devices.out_of_memory import memory_counters
from hyport_lib.devices.probe import DeviceListing, probe_devices
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


def card_memory(backend: Optional[Backend], card_memory_gib: Optional[float],
                listing: Optional[DeviceListing] = None) -> tuple[Optional[int], str]:
    """``(bytes or None, source)``: the smallest card of the device tool's listing (npu-smi,
    nvidia-smi: ``listing`` where the caller has one), else the parameter, else unknown.
    Never the runtime (``torch.npu.get_device_properties``): asked from the launcher it
    would open a context on card 0 and hold it through the run."""
    given = int(card_memory_gib * 2 ** 30) if card_memory_gib else None
    if backend is not None and backend.is_accelerator:
        listing = listing if listing is not None else probe_devices(backend)
        sizes = [(d.total_mb, d.name) for d in listing.devices if d.total_mb]
        if sizes and listing.source in ("npu-smi", "nvidia-smi"):
            total_mb, name = min(sizes)
            source = f"{name}, {total_mb:,} MB as {listing.source} reports it"
            if given is not None and abs(given - total_mb * 2 ** 20) > 2 ** 30:
                source += f"; card_memory_gib={card_memory_gib:g} set aside"
            return total_mb * 2 ** 20, source
    if given is not None:
        return given, f"card_memory_gib={card_memory_gib:g}"
    return None, "unknown: no device tool lists the cards' memory, and no card_memory_gib"


def capacity(backend: Optional[Backend], card_memory_gib: Optional[float] = None,
             host_ram_gib: Optional[float] = None, listing: Optional[DeviceListing] = None) -> Capacity:
    """``host_ram_gib``: the RAM of a host planned for from another (``hyport plan``)."""
    card, card_source = card_memory(backend, card_memory_gib, listing)
    if host_ram_gib:
        host, host_source = int(host_ram_gib * 2 ** 30), f"host_ram_gib={host_ram_gib:g}"
    else:
        host, host_source = host_ram()
    return Capacity(card, card_source, host, host_source)


def describe(found: Capacity, kind: str = "npu") -> str:
    """One line for stage 01 and ``hyport plan``: ``64.0 GiB per card (910B3, 65,536 MB as
    npu-smi reports it); host RAM 1,511 GiB (the host's RAM)``; on CPU the host alone."""
    host = f"host RAM {format_gib(found.host_bytes)} ({found.host_source})"
    if kind == "cpu":
        return host
    card = (f"{format_gib(found.card_bytes)} per card ({found.card_source})" if found.card_bytes
            else f"card memory {found.card_source}")
    return f"{card}; {host}"
