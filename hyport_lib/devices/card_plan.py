"""Preflight of the inference grid and of a training launch: which cards run, which are
skipped and why. A busy card (:mod:`.probe`) is skipped unless ``allow_busy_cards=True``;
nothing is ever killed to free a card. The plan is a value: the notebook shows it, then the
grid runs exactly that plan.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional

from hyport_lib.backend import Backend
from hyport_lib.devices.host_memory import require_host_ram
from hyport_lib.devices.probe import probe_devices
from hyport_lib.devices.visible_devices import inherited_card_ids
from hyport_lib.utils.wording import plural

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class CardPlan:
    card: int
    run: bool
    busy_processes: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**asdict(self), "busy_reason": self.busy_reason}

    @property
    def busy_reason(self) -> str:
        procs = ", ".join(
            f"pid {p.get('pid')} ({p.get('name') or '?'}, {p.get('memory_mb', '?')} MB)"
            for p in self.busy_processes)
        return f"card busy: {procs}" if procs else ""


@dataclass
class GridPlan:
    kind: str
    cards: list[CardPlan]
    allow_busy_cards: bool
    preflight_error: Optional[str] = None

    @property
    def to_run(self) -> list[int]:
        return [c.card for c in self.cards if c.run]

    def frame(self) -> pd.DataFrame:
        # pandas only here, for the table: planning a grid (the stage's import) stays light.
        import pandas as pd

        return pd.DataFrame([{
            "card": c.card,
            "status": ("run (busy, allowed)" if c.busy_processes else "run") if c.run else "skipped-busy",
            "processes": c.busy_reason.removeprefix("card busy: ") or "none",
        } for c in self.cards], columns=["card", "status", "processes"])


def available_cards(backend: Backend, num_cards: Optional[int] = None) -> list[int]:
    """Card ids as the device tools number them: on CPU worker processes; on an accelerator
    the visible cards, the entries of an inherited visible-devices variable when there is one."""
    if num_cards is not None and int(num_cards) < 1:
        raise ValueError(f"num_cards={num_cards!r}: expected a positive number or None (all cards)")
    if backend.kind == "cpu":
        count = int(num_cards) if num_cards else backend.num_cards()
        require_host_ram("cpu", count)  # 64 "cards" on a laptop would all start at once
        return list(range(count))
    ids = list(range(backend.num_cards()))
    var = backend.visible_devices_var
    inherited = os.environ.get(var) if var else None
    if inherited is not None:
        ids = inherited_card_ids(var, inherited)[:len(ids)]
    if num_cards is not None:
        if int(num_cards) > len(ids):
            raise ValueError(f"num_cards={num_cards}: only {len(ids)} {backend.kind} {plural('card', len(ids))} "
                             f"{plural('is', len(ids), 'are')} visible")
        ids = ids[:int(num_cards)]
    return ids


def _busy_from_environment(backend: Backend) -> tuple[dict, Optional[str]]:
    """Unknown is not busy."""
    try:
        listing = probe_devices(backend)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        return {}, f"busy-card check failed: {type(exc).__name__}: {exc}"
    busy = {d.index: list(d.processes) for d in listing.devices if d.processes}
    note = None
    if not listing.processes_known:
        note = f"busy-card check could not list processes ({listing.error or listing.source})"
    elif listing.error:
        note = f"busy-card check: {listing.error}"
    return busy, note


def plan_grid(backend: Backend, num_cards: Optional[int] = None, allow_busy_cards: bool = False,
              cards: Optional[list[int]] = None, busy: Optional[dict] = None) -> GridPlan:
    """``cards``: default the first ``num_cards`` available; ``busy``: ``{card: [process, ...]}``
    (dicts or device processes), by default what :func:`.probe.probe_devices` finds."""
    ids = [int(c) for c in cards] if cards is not None else available_cards(backend, num_cards)
    if len(set(ids)) != len(ids):
        raise ValueError(f"cards={cards!r}: each card may appear once")
    preflight_error = None
    if busy is None:
        busy, preflight_error = _busy_from_environment(backend)
    plans = []
    for card in ids:
        procs = [dict(p) if isinstance(p, dict) else asdict(p) for p in (busy.get(card) or [])]
        plans.append(CardPlan(card=card, run=allow_busy_cards or not procs, busy_processes=procs))
    return GridPlan(kind=backend.kind, cards=plans, allow_busy_cards=allow_busy_cards,
                    preflight_error=preflight_error)
