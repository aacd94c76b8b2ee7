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
from hyport_lib.utils.wording import counted

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
    #: the changes the search tried (none fitted where ``nearest`` is None), in words
    tried: list[str] = field(default_factory=list)

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
        per = f" ({counted(ranks, 'rank')} x {format_gib(est.host_bytes_per_rank)})" if ranks > 1 else ""
        if cap is None:
            return f"needs {format_gib(est.host_bytes)} of host RAM{per}; the host's RAM is unknown"
        verdict = "fits" if self.host_fits else "does not fit"
        return (f"{verdict}: {format_gib(est.host_bytes).removesuffix(' GiB')} of {format_gib(cap)} host RAM"
                f"{per} ({self.capacity.host_source})")

    def lines(self) -> list[str]:
        return [line for line in (self.card_line(), self.host_line()) if line]

    def parameter_to_change(self) -> str:
        """The parameter the nearest plan changes first. Without one: ``reload`` for a reload;
        ``num_cards`` for a host short of RAM running several processes; else ``model_path``
        (no setting of the stage helps)."""
        if self.nearest is not None:
            return self.nearest.parameter
        workload = self.estimate.workload
        if workload.stage == "reload":
            return "reload"
        # nothing this stage sets makes room (each change was tried): a smaller model would,
        # or, where the host is short, fewer processes on it with more hosts
        return "num_cards" if self.host_fits is False and workload.ranks_per_host > 1 else "model_path"

    def refusal(self) -> str:
        """One line: what does not fit, by how much, and the nearest plan that does."""
        est = self.estimate
        short = []
        if self.card_fits is False:
            short.append(f"{format_gib(est.card_bytes)} per card > the card's {format_gib(self.capacity.card_bytes)} "
                         f"({self.capacity.card_source})")
        if self.host_fits is False:
            ranks = est.workload.ranks_per_host
            short.append(f"{format_gib(est.host_bytes)} of host RAM for {counted(ranks, 'process')} "
                         f"> the host's {format_gib(self.capacity.host_bytes)} ({self.capacity.host_source})")
        said = f"{est.shape.name} ({est.shape.parameters / 1e9:.3g} B parameters) does not fit for " \
               f"{est.workload.describe()}: " + "; ".join(short)
        if self.nearest is not None:
            figures = ", ".join(line.split(": ", 1)[1].split(" (")[0] for line in self.nearest.fit.lines()
                                if line.startswith("fits"))
            said += f"; nearest plan that fits: {self.nearest.change} ({figures})"
        else:
            tried = f" ({', '.join(self.tried)} tried)" if self.tried else ""
            said += f"; no plan hyport knows fits{tried}"
            if est.workload.stage == "reload":
                said += "; set reload=False (the headers and the scan still run)"
        return said


@dataclass
class Nearest:
    change: str  # in the stages' parameters: "zero_stage=3 + finetuning_type=lora"
    parameter: str  # the first one changed: what a refusal names
    fit: Fit


@dataclass(frozen=True)
class _Change:
    """One change of a plan, said in the parameters a user sets (``zero_stage=2 +
    offload_optimizer=True``: every parameter it moves), and the first of them."""

    said: str
    parameter: str
    workload: Workload


def _to_bf16(w: Workload) -> Optional[_Change]:
    if w.dtype != "float32":
        return None
    said, parameter = _DTYPE_PARAMETER[w.stage]
    return _Change(said, parameter, replace(w, dtype="bfloat16"))


def _checkpointing(w: Workload) -> Optional[_Change]:
    if w.stage != "training" or w.gradient_checkpointing:
        return None
    return _Change("gradient_checkpointing=True", "gradient_checkpointing", replace(w, gradient_checkpointing=True))


def _zero3(w: Workload) -> Optional[_Change]:
    if w.stage != "training" or w.zero_stage >= 3:
        return None
    return _Change("zero_stage=3", "zero_stage", replace(w, zero_stage=3))


def _offload(w: Workload) -> Optional[_Change]:
    if w.stage != "training" or w.offload_optimizer:
        return None
    if w.zero_stage >= 2:
        return _Change("offload_optimizer=True", "offload_optimizer", replace(w, offload_optimizer=True))
    # stage 04 offloads from ZeRO-2 on: the change moves both
    return _Change("zero_stage=2 + offload_optimizer=True", "zero_stage",
                   replace(w, zero_stage=2, offload_optimizer=True))


def _lora(w: Workload) -> Optional[_Change]:
    if w.stage != "training" or w.finetuning != "full":
        return None
    return _Change("finetuning_type=lora", "finetuning_type", replace(w, finetuning="lora"))


#: Changes tried for the nearest plan, in the order a user would rather take them: each
#: keeps the model and the data.
_CHANGES: tuple[Callable[[Workload], Optional[_Change]], ...] = (_to_bf16, _checkpointing, _zero3, _offload, _lora)
#: The dtype's parameter in each stage: training's ``precision``, 03's and 05's ``dtype``,
#: 02's ``model_dtype``.
_DTYPE_PARAMETER = {"training": ("precision=bf16", "precision"), "inference": ("dtype=bfloat16", "dtype"),
                    "reload": ("dtype=bfloat16", "dtype"), "model check": ("model_dtype=bfloat16", "model_dtype")}
#: Each change's words in the list of what was tried.
_TRIED = {_to_bf16: "bfloat16", _checkpointing: "gradient checkpointing", _zero3: "ZeRO-3",
          _offload: "an offloaded optimizer", _lora: "LoRA"}


def fit(shape: ModelShape, workload: Workload, capacity: Capacity, *, search: bool = True) -> Fit:
    """The estimate against the capacity; where it does not fit, the nearest plan that does:
    one change, then two, then fewer processes a host (halved until one is left), alone and
    with each single change."""
    result = Fit(estimate(shape, workload), capacity)
    if result.fits or not search:
        return result
    result.tried = [_TRIED[change] for change in _CHANGES if change(workload) is not None]
    if workload.ranks_per_host > 1:
        result.tried.append("fewer processes")
    for change in _candidates(workload):
        candidate = Fit(estimate(shape, change.workload), capacity)
        if candidate.fits:
            result.nearest = Nearest(change.said, change.parameter, candidate)
            return result
    return result


def _combined(workload: Workload, picked) -> Optional[_Change]:
    changes, current = [], workload
    for make in picked:
        change = make(current)
        if change is None:
            return None
        changes.append(change)
        current = change.workload
    return _Change(" + ".join(c.said for c in changes), changes[0].parameter, current)


def _candidates(workload: Workload):
    for count in (1, 2):
        for picked in combinations(_CHANGES, count):
            change = _combined(workload, picked)
            if change is not None:
                yield change
    ranks = workload.ranks_per_host // 2
    while ranks >= 1:
        # fewer processes on each host: the job's world shrinks with them
        fewer = replace(workload, ranks_per_host=ranks,
                        world_size=max(1, workload.world_size * ranks // workload.ranks_per_host))
        said = f"{counted(ranks, 'process')} a host instead of {workload.ranks_per_host}"
        yield _Change(said, "num_cards", fewer)
        for make in _CHANGES:
            change = make(fewer)
            if change is not None:
                yield _Change(f"{said} + {change.said}", "num_cards", change.workload)
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
