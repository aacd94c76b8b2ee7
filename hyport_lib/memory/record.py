"""A stage's memory plan as its record keeps it: the fit's lines and the estimate's items,
typed so that a result read back (:func:`~hyport_lib.utils.typed_records.from_mapping`)
gives the same plan the stage judged, with no memory model at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.memory.fit import Fit


@dataclass
class MemoryRow:
    """One item of one rank's estimate (:class:`~hyport_lib.memory.model.MemoryItem`)."""

    where: str = ""  # card | host
    what: str = ""
    gib: float = 0.0
    how: str = ""


@dataclass
class MemoryPlan:
    """What a stage's plan found: ``card_line`` is "" on CPU (the host holds everything)."""

    model: str = ""
    parameters: int = 0
    setting: str = ""  # the workload in words: ZeRO-2, bf16, full, seq 2048, micro-batch 1
    fits: bool = True
    card_line: str = ""
    host_line: str = ""
    card_gib: Optional[float] = None  # one rank's card; None on CPU
    card_capacity_gib: Optional[float] = None  # None: unknown
    host_gib: float = 0.0  # every rank of one host
    host_capacity_gib: Optional[float] = None
    shape_source: str = ""  # where the model's sizes were read
    rows: list[MemoryRow] = field(default_factory=list)

    @classmethod
    def of(cls, found: Fit) -> "MemoryPlan":
        est, cap = found.estimate, found.capacity
        on_card = est.workload.kind != "cpu"
        return cls(model=est.shape.name, parameters=est.shape.parameters, setting=est.workload.describe(),
                   fits=found.fits, card_line=found.card_line(), host_line=found.host_line(),
                   card_gib=_gib(est.card_bytes) if on_card else None,
                   card_capacity_gib=_gib(cap.card_bytes) if on_card and cap.card_bytes else None,
                   host_gib=_gib(est.host_bytes), host_capacity_gib=_gib(cap.host_bytes) if cap.host_bytes else None,
                   shape_source=est.shape.source,
                   rows=[MemoryRow(item.where, item.what, _gib(item.bytes, 3), item.how) for item in est.items])

    def lines(self) -> list[str]:
        return [line for line in (self.card_line, self.host_line) if line]


def _gib(n_bytes: float, digits: int = 2) -> float:
    return round(n_bytes / 2 ** 30, digits)
