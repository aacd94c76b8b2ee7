"""Host memory against what the ranks of a stage need: RAM (capped by the container's
cgroup limit) and /dev/shm, per card. Stage 01 shows these checks; a CPU worker count the
host cannot hold is refused before any model is read (:func:`require_host_ram`).

Every figure here is in GiB (2**30 bytes), as psutil, the cgroup files and ``--shm-size``'s
``g`` count it; the ``_gb`` names (recorded keys, parameters users type) stay as they are.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.results import Check
from hyport_lib.utils.wording import counted, plural

#: GiB per card, by backend kind, when the caller gives no requirement. Accelerator
#: ranks each load the model on the host before moving it; CPU workers run tiny models.
DEFAULT_RAM_GB_PER_CARD = {"npu": 16.0, "cuda": 16.0, "cpu": 1.0}
DEFAULT_SHM_GB_PER_CARD = {"npu": 1.0, "cuda": 1.0, "cpu": 0.25}

def host_memory() -> dict:
    """``ram_total_gb`` and ``ram_available_gb`` this process may use: the host's, capped by
    the container's memory limit (cgroup v2 or v1) when lower."""
    import psutil

    vm = psutil.virtual_memory()
    total, available = round(vm.total / 2**30, 2), round(vm.available / 2**30, 2)
    limit = cgroup_memory_limit_gb()
    if limit is not None and limit < total:
        used = _cgroup_gb(("memory.current", "memory/memory.usage_in_bytes")) or 0.0
        return {"ram_total_gb": round(limit, 2),
                "ram_available_gb": round(max(0.0, min(available or limit, limit - used)), 2),
                "ram_limit": "cgroup"}
    return {"ram_total_gb": total, "ram_available_gb": available}


def _cgroup_gb(names: tuple[str, ...], root: Path = Path("/sys/fs/cgroup")) -> Optional[float]:
    """The first of the cgroup files ``names`` that holds a number, in GiB."""
    for name in names:
        try:
            text = (root / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2 ** 60:  # v1 writes a huge number for "no limit"
            return int(text) / 2 ** 30
    return None


def cgroup_memory_limit_gb(root: Path = Path("/sys/fs/cgroup")) -> Optional[float]:
    """None when unlimited or unknown."""
    return _cgroup_gb(("memory.max", "memory/memory.limit_in_bytes"), root)


def check_host_memory(kind: str, num_cards: int, system: Mapping,
                      ram_gb_per_card: Optional[float] = None,
                      shm_gb_per_card: Optional[float] = None) -> list[Check]:
    ram_per = DEFAULT_RAM_GB_PER_CARD.get(kind, 1.0) if ram_gb_per_card is None else ram_gb_per_card
    shm_per = DEFAULT_SHM_GB_PER_CARD.get(kind, 0.25) if shm_gb_per_card is None else shm_gb_per_card
    shm_need = shm_per * num_cards
    return [
        _room_check("host_ram", "RAM", system.get("ram_total_gb"), system.get("ram_available_gb"),
                    ram_per, num_cards, too_small="FAIL"),
        _room_check("dev_shm", "/dev/shm", system.get("shm_total_gb"), system.get("shm_free_gb"),
                    shm_per, num_cards, too_small="WARN",
                    hint=(": DataLoader workers and collectives crash with 'Bus error'; start "
                          f"the container with {shm_size_flag(shm_need)} or more")),
    ]


def shm_size_flag(need_gb: float) -> str:
    """``--shm-size`` in whole GiB (docker's ``g``), rounded up."""
    return f"--shm-size={max(1, math.ceil(need_gb - 1e-9))}g"


#: ``size=`` of a tmpfs mount option, as /proc/mounts writes it (``65536k``, ``8g``).
_SIZE_OPTION = re.compile(r"(?:^|,)size=(\d+)([kmg]?)(?:,|$)", re.IGNORECASE)
_SIZE_UNIT_GB = {"": 1 / 2 ** 30, "k": 1 / 2 ** 20, "m": 1 / 2 ** 10, "g": 1.0}


def shm_size_from_mounts(text: str) -> Optional[float]:
    """The GiB of the tmpfs on /dev/shm, from /proc/mounts (``shm /dev/shm tmpfs rw,...,size=65536k
    0 0``, as ``--shm-size`` sets it). A later mount on the same folder hides the earlier one
    (Kubernetes mounts a memory ``emptyDir`` over the runtime's 64 MB), so the last line is
    the one in effect. None without a line or ``size=`` (tmpfs then takes half the RAM)."""
    options = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            options = fields[3]
    match = _SIZE_OPTION.search(options) if options is not None else None
    return int(match.group(1)) * _SIZE_UNIT_GB[match.group(2).lower()] if match else None


def check_container_shm(total_gb: Optional[float], num_cards: int, per_card_gb: float,
                        where: str = "") -> Check:
    """``total_gb``: the container's ``--shm-size`` (None: SKIP); ``where``: `` in TREE``."""
    need = per_card_gb * max(num_cards, 1)
    wanted = _wanted(f"{need:g}", num_cards, per_card_gb)
    if total_gb is None:
        return Check("container_shm", "SKIP", f"/dev/shm size unknown{where} (no size= on its "
                                              f"/proc/mounts line): not judged, {wanted}")
    if total_gb < need:
        return Check("container_shm", "WARN", f"/dev/shm{where} is {total_gb:.3g} GiB < {wanted}: "
                                              f"DataLoader workers and collectives die with 'Bus "
                                              f"error'; start the container with {shm_size_flag(need)}")
    return Check("container_shm", "PASS", f"/dev/shm{where} is {total_gb:.3g} GiB, {wanted}")


def require_host_ram(kind: str, num_cards: int, what: str = "worker") -> None:
    """ValueError for ``num_cards`` ranks (each a ``what``, singular) the host's RAM cannot
    hold at the ``host_ram`` check's default figure: asked before the model is known (64
    CPU "cards" would all start at once); the model's own need is the memory model's
    (:mod:`hyport_lib.memory`)."""
    check = check_host_memory(kind, num_cards, host_memory())[0]
    if check.verdict != "FAIL":
        return
    if num_cards == 1:  # one is not "too many"
        said = f"num_cards=1: this host cannot hold one {kind} {what}: {check.reason}"
    else:
        said = f"num_cards={num_cards}: too many {kind} {plural(what, num_cards)} for this host: {check.reason}"
    raise ValueError(said)


def _room_check(name: str, label: str, total: Optional[float], free: Optional[float],
                per_card: float, num_cards: int, too_small: str, hint: str = "") -> Check:
    """SKIP when unknown, ``too_small`` when the total cannot hold the cards, WARN when only
    the free part falls short."""
    need = per_card * num_cards
    wanted = _wanted(f"{need:.2f}", num_cards, per_card)
    if total is None:
        return Check(name, "SKIP", f"{label} size unknown")
    if total < need:
        return Check(name, too_small, f"{label} is {total:.2f} GiB < {wanted}{hint}")
    if free is not None and free < need:
        return Check(name, "WARN", f"only {free:.2f} of {total:.2f} GiB {label} free, {wanted}")
    shown = f"{free:.2f} of {total:.2f}" if free is not None else f"{total:.2f}"
    return Check(name, "PASS", f"{shown} GiB {label} free, {wanted}")


def _wanted(need: str, num_cards: int, per_card: float) -> str:
    each = f" ({per_card:g} GiB each)" if num_cards != 1 else ""
    return f"{need} GiB needed for {counted(num_cards, 'card')}{each}"
