"""Whether an estimate (:mod:`.model`) fits the card and the host, and, where it does not, the
nearest plan that does: the answer to "does it fit on 8 x 64 GB?" before anything loads.

A stage calls :func:`require_fit` in its ``plan``; the refusal is one line with the figures
and the change that would fit (bfloat16, gradient checkpointing, ZeRO-3, offload, LoRA, fewer
workers), each tried alone, then two at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Callable, Optional

from hyport_lib.memory.model import MemoryEstimate, Workload, estimate
from hyport_lib.memory.shape import ModelShape, format_gib

#: What a card offers a rank of a known product, in bytes, where the runtime cannot say
#: (a laptop planning for a cluster). 910B3: 64 GiB of HBM (npu-smi's 65536 MB).
CARD_PRODUCTS = {"910B1": 64 * 2 ** 30, "910B2": 64 * 2 ** 30, "910B3": 64 * 2 ** 30, "910B4": 32 * 2 ** 30,
                 "910B2C": 64 * 2 ** 30, "H100": 80 * 2 ** 30, "H200": 141 * 2 ** 30, "A100": 80 * 2 ** 30}


@dataclass(frozen=True)
class Capacity:
    """What one card and one host hold, and where each figure comes from; None: unknown."""

    card_bytes: Optional[int] = None
    card_source: str = "unknown"
    host_bytes: Optional[int] = None
    host_source: str = "unknown"


@dataclass
class Fit:
    """An estimate against a capacity."""

    estimate: MemoryEstimate
    capacity: Capacity
    #: the nearest plan that fits, when this one does not
    nearest: Optional["Nearest"] = field(default=None, repr=False)

    @property
    def card_fits(self) -> Optional[bool]:
        if self.estimate.workload.kind == "cpu":
            return None
        cap = self.capacity.card_bytes
        return None if cap is None else self.estimate.card_bytes <= cap

    @property
    def host_fits(self) -> Optional[bool]:
        cap = self.capacity.host_bytes
        return None if cap is None else self.estimate.host_bytes <= cap

    @property
    def fits(self) -> bool:
        """False only where a known capacity is exceeded."""
        return self.card_fits is not False and self.host_fits is not False

    def card_line(self) -> str:
        """``fits: 30.1 of 64 GiB per card (ZeRO-2, bf16, seq 2048, micro-batch 1)``."""
        est, cap = self.estimate, self.capacity.card_bytes
        if est.workload.kind == "cpu":
            return ""
        setting = est.workload.describe()
        if cap is None:
            return f"needs {format_gib(est.card_bytes)} per card ({setting}); the card's memory is unknown"
        verdict = "fits" if self.card_fits else "does not fit"
        return f"{verdict}: {format_gib(est.card_bytes).removesuffix(' GiB')} of {format_gib(cap)} per card ({setting})"

    def host_line(self) -> str:
        est, cap = self.estimate, self.capacity.host_bytes
        ranks = est.workload.ranks_per_host
        per = f" ({ranks} {_plural(ranks, 'rank')} x {format_gib(est.host_bytes_per_rank)})" if ranks > 1 else ""
        if cap is None:
            return f"needs {format_gib(est.host_bytes)} of host RAM{per}; the host's RAM is unknown"
        verdict = "fits" if self.host_fits else "does not fit"
        return (f"{verdict}: {format_gib(est.host_bytes).removesuffix(' GiB')} of {format_gib(cap)} host RAM"
                f"{per} ({self.capacity.host_source})")

    def lines(self) -> list[str]:
        return [line for line in (self.card_line(), self.host_line()) if line]

    def parameter_to_change(self) -> str:
        """The parameter the nearest plan changes first. Without one: where the card is short,
        ``zero_stage`` for a training, the dtype elsewhere (each card holds the whole model);
        where the host is, ``num_cards`` (processes on it) or, for a reload, ``reload``."""
        if self.nearest is not None:
            return self.nearest.parameter
        stage = self.estimate.workload.stage
        if self.card_fits is False:
            return "zero_stage" if stage == "training" else _DTYPE_PARAMETER[stage][1]
        return "reload" if stage == "reload" else "num_cards"

    def refusal(self) -> str:
        """One line: what does not fit, by how much, and the nearest plan that does."""
        est = self.estimate
        short = []
        if self.card_fits is False:
            short.append(f"{format_gib(est.card_bytes)} per card > the card's {format_gib(self.capacity.card_bytes)} "
                         f"({self.capacity.card_source})")
        if self.host_fits is False:
            ranks = est.workload.ranks_per_host
            short.append(f"{format_gib(est.host_bytes)} of host RAM for {ranks} {_plural(ranks, 'process', 'es')} "
                         f"> the host's {format_gib(self.capacity.host_bytes)} ({self.capacity.host_source})")
        said = f"{est.shape.name} ({est.shape.parameters / 1e9:.3g} B parameters) does not fit for " \
               f"{est.workload.describe()}: " + "; ".join(short)
        if self.nearest is not None:
            figures = ", ".join(line.split(": ", 1)[1].split(" (")[0] for line in self.nearest.fit.lines()
                                if line.startswith("fits"))
            said += f"; nearest plan that fits: {self.nearest.change} ({figures})"
        else:
            tried = ("bfloat16, gradient checkpointing, ZeRO-3, offload, LoRA, fewer processes"
                     if est.workload.stage == "training" else "bfloat16, fewer processes")
            said += f"; no plan hyport knows fits ({tried} tried)"
        return said


@dataclass
class Nearest:
    change: str  # in the stages' parameters: "zero_stage=3 + offload_optimizer=True"
    parameter: str  # the first one changed: what a refusal names
    fit: Fit


def _plural(count: int, word: str, suffix: str = "s") -> str:
    return word if count == 1 else word + suffix


#: Changes tried for the nearest plan, in the order a user would rather take them: each
#: keeps the model and the data; the names are the stages' parameters.
_CHANGES: tuple[tuple[str, str, Callable[[Workload], Optional[Workload]]], ...] = (
    ("precision bf16", "precision", lambda w: replace(w, dtype="bfloat16") if w.dtype == "float32" else None),
    ("gradient_checkpointing=True", "gradient_checkpointing", lambda w: replace(w, gradient_checkpointing=True)
        if w.stage == "training" and not w.gradient_checkpointing else None),
    ("zero_stage=3", "zero_stage", lambda w: replace(w, zero_stage=3)
        if w.stage == "training" and w.zero_stage < 3 else None),
    ("offload_optimizer=True", "offload_optimizer", lambda w: replace(w, offload_optimizer=True,
                                                                      zero_stage=max(w.zero_stage, 2))
        if w.stage == "training" and not w.offload_optimizer else None),
    ("finetuning_type=lora", "finetuning_type", lambda w: replace(w, finetuning="lora")
        if w.stage == "training" and w.finetuning == "full" else None),
)
#: Outside training the dtype is the stages' ``dtype`` parameter (03, 05) or ``model_dtype`` (02).
_DTYPE_PARAMETER = {"training": ("precision bf16", "precision"), "inference": ("dtype=bfloat16", "dtype"),
                    "reload": ("dtype=bfloat16", "dtype"), "model check": ("model_dtype=bfloat16", "model_dtype")}


def fit(shape: ModelShape, workload: Workload, capacity: Capacity, *, search: bool = True) -> Fit:
    """The estimate against the capacity; where it does not fit, the nearest plan that does:
    one change, then two, then fewer processes a host (halved until one is left), alone and
    with each single change."""
    result = Fit(estimate(shape, workload), capacity)
    if result.fits or not search:
        return result
    for said, parameter, changed in _candidates(workload):
        candidate = Fit(estimate(shape, changed), capacity)
        if candidate.fits:
            result.nearest = Nearest(said, parameter, candidate)
            return result
    return result


def _changes(stage: str):
    said, parameter = _DTYPE_PARAMETER[stage]
    return ((said, parameter, _CHANGES[0][2]), *_CHANGES[1:])


def _candidates(workload: Workload):
    changes = _changes(workload.stage)
    for count in (1, 2):
        for picked in combinations(changes, count):
            changed = workload
            for _, _, change in picked:
                changed = change(changed) if changed is not None else None
            if changed is not None:
                yield " + ".join(said for said, _, _ in picked), picked[0][1], changed
    ranks = workload.ranks_per_host // 2
    while ranks >= 1:
        # fewer processes on each host: the job's world shrinks with them
        fewer = replace(workload, ranks_per_host=ranks,
                        world_size=max(1, workload.world_size * ranks // workload.ranks_per_host))
        said = f"{ranks} {_plural(ranks, 'process', 'es')} a host instead of {workload.ranks_per_host}"
        yield said, "num_cards", fewer
        for name, _, change in changes:
            changed = change(fewer)
            if changed is not None:
                yield f"{said} + {name}", "num_cards", changed
        ranks //= 2


class DoesNotFit(ValueError):
    """A stage's plan that the card or the host cannot hold; ``.fit`` has the figures."""

    def __init__(self, fit: Fit, parameter: str):
        self.fit = fit
        super().__init__(f"{parameter}: {fit.refusal()}")


def require_fit(shape: ModelShape, workload: Workload, capacity: Capacity) -> Fit:
    """The fit, or :class:`DoesNotFit` naming the parameter a user would change."""
    result = fit(shape, workload, capacity)
    if not result.fits:
        raise DoesNotFit(result, result.parameter_to_change())
    return result
