"""Stage 01's memory facts: each card's memory, the host's RAM and, for a checkpoint
folder, the memory model's host need per rank in place of the backend's default figure."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.backend import Backend
from hyport_lib.devices.probe import DeviceListing
from hyport_lib.memory.capacity import capacity, describe
from hyport_lib.memory.fit import Capacity, fit
from hyport_lib.memory.model import Workload
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.memory.shape import format_gib, loading_dtype, read_model_shape
from hyport_lib.results import Check

MIB = 2 ** 20


@dataclass
class MemoryFacts:
    """``line``: the capacity (:func:`hyport_lib.memory.capacity.describe`); ``model``: the
    memory model's inference of ``model_path`` (None: no checkpoint folder to read)."""

    card_gib: Optional[float] = None
    card_source: str = ""
    host_gib: Optional[float] = None
    host_source: str = ""
    line: str = ""
    listed: list[str] = field(default_factory=list)  # each card's memory as the device tool lists it
    model: Optional[MemoryPlan] = None
    host_per_rank_gib: Optional[float] = None  # what one rank of the model needs of the host
    model_note: str = ""  # why the model was not planned, where it was not


def listed_memory(listing: DeviceListing) -> list[str]:
    """``cards 0-7: 64.0 GiB HBM``: runs of cards with the same total, as the tool lists them."""
    runs: list[tuple[list[int], int, str]] = []
    for d in listing.devices:
        if not d.total_mb:
            continue
        kind = "HBM" if d.hbm_total_mb is not None else "memory"
        if runs and runs[-1][1] == d.total_mb and runs[-1][2] == kind:
            runs[-1][0].append(d.index)
        else:
            runs.append(([d.index], d.total_mb, kind))
    return [f"{_cards(indices)}: {format_gib(total * MIB)} {kind}" for indices, total, kind in runs]


def _cards(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"card {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"cards {indices[0]}-{indices[-1]}"
    return "cards " + ", ".join(map(str, indices))


def model_need(model_path: str, found: Capacity, kind: str, cards: int) -> tuple[Optional[MemoryPlan], Optional[float], str]:
    """The memory model's inference of ``model_path`` in its stored dtype on ``cards`` ranks
    of this host: its plan, one rank's host GiB, and why none where none (no folder with
    safetensors headers: the tiny model, a hub id, .bin weights)."""
    if not Path(model_path).is_dir():
        return None, None, f"model_path={model_path!r} is no folder: the backend's default per-card figure"
    try:
        shape = read_model_shape(model_path)
    except (OSError, ValueError) as exc:  # a .bin checkpoint: 01 builds no model for a figure
        return None, None, f"the backend's default per-card figure ({str(exc).splitlines()[0][:200]})"
    ranks = max(1, cards)
    workload = Workload("inference", kind, loading_dtype("auto", model_path, shape), world_size=ranks,
                        ranks_per_host=ranks)
    found_fit = fit(shape, workload, found, search=False)
    return MemoryPlan.of(found_fit), round(found_fit.estimate.host_bytes_per_rank / 2 ** 30, 2), ""


def memory_facts(backend: Backend, listing: DeviceListing, model_path: str, cards: int,
                 card_memory_gib: Optional[float]) -> MemoryFacts:
    found = capacity(backend, card_memory_gib, listing=listing)
    plan, per_rank, note = model_need(model_path, found, backend.kind, cards)
    return MemoryFacts(_gib(found.card_bytes), found.card_source, _gib(found.host_bytes), found.host_source,
                       describe(found, backend.kind), listed_memory(listing), plan, per_rank, note)


def _gib(n_bytes: Optional[int]) -> Optional[float]:
    return None if n_bytes is None else round(n_bytes / 2 ** 30, 2)


def check_card_memory(kind: str, facts: MemoryFacts) -> Check:
    """PASS where a card's memory is known (the model's card line beside it where the model
    is known, WARN where that does not fit); SKIP on CPU and where it is unknown: nothing
    judged, the parameter that would say it named."""
    listed = f"; {'; '.join(facts.listed)}" if facts.listed else ""
    model = ""
    if facts.model is not None and facts.model.card_line:
        model = f"; {facts.model.model}: {facts.model.card_line}"
    if kind == "cpu":
        return Check("card_memory", "SKIP", f"no cards on cpu (the workers share the host's RAM): {facts.line}")
    if facts.card_gib is not None:
        verdict = "WARN" if facts.model is not None and facts.model.card_line.startswith("does not fit") else "PASS"
        return Check("card_memory", verdict, f"{facts.line}{listed}{model}")
    return Check("card_memory", "SKIP", f"{facts.line}{listed}: set card_memory_gib (910B3: 64) for the memory "
                                        f"plans of stages 02-04")


def host_need_reason(facts: MemoryFacts) -> str:
    """What the host_ram check's per-card figure is, where the memory model made it."""
    if facts.model is None or facts.host_per_rank_gib is None:
        return ""
    return (f" (per rank: the memory model's {facts.model.setting} of {facts.model.model}, "
            f"{facts.host_per_rank_gib:.3g} GiB of host RAM)")

