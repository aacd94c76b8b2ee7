"""The inference grid's result: one row per card (built by :mod:`hyport_lib.inference.grid`,
only read here) and the cross-card comparison. A live grid's unfinished rows say ``running``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from hyport_lib.devices.card_plan import GridPlan
from hyport_lib.proof.choice import AttentionChoice
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.processes import read_log_tail
from hyport_lib.results import Provenance
from hyport_lib.triage import Triage
from hyport_lib.utils.typed_records import fields_of

STATUSES = ("ok", "failed", "timeout", "skipped-busy", "interrupted")
#: What torch_npu prints when an operator has no NPU kernel.
FALLBACK_MARKER = "will fall back to run on the CPU"
_FALLBACK_OP_RE = re.compile(r"operator '([^']+)'[^\n]*?" + re.escape(FALLBACK_MARKER))
PREVIEW_CHARS = 60

COLUMNS = [
    "card", "device", "status", "load_s", "cold_s", "first_token_s", "tokens_per_s",
    "decode_tokens_per_s",
    "new_tokens",
    "peak_memory_mb", "memory_source", "single_output", "batch_outputs", "output_hash",
    "cpu_fallback_warnings", "fallback_ops", "wall_s", "log_path", "error", "diagnosis", "not_applicable",
]


@dataclass
class GridProgress:
    """Passed to ``on_progress``: the table so far (unfinished cards say ``running``), at the
    start, whenever a card finishes, every second or so between, and at the end (``running``
    False; ``stopped`` when interrupted)."""

    frame: pd.DataFrame
    done: int
    total: int
    card: Optional[int] = None  # the card that just finished; None otherwise
    status: Optional[str] = None
    elapsed_s: dict = field(default_factory=dict)  # card -> seconds since its worker started
    running: bool = True
    stopped: bool = False


@dataclass
class CardOutputs:
    """What one card said, in full: the answer to the single prompt, the batch's answers."""

    single: Optional[str] = None
    batch: Optional[list[str]] = None


@dataclass
class GridResult:
    """The grid's answer: one row per card (:data:`COLUMNS`) plus the cross-card comparison;
    ``outputs``: each finished card's full texts (the rows hold previews), ``diagnoses``:
    what the logs of each card that did not finish say (:mod:`hyport_lib.triage`)."""

    rows: list[dict]
    consistent: bool
    differing_cards: list[int]
    log_dir: Path
    wall_s: float
    timeout_s: float = 0.0
    provenance: Optional[Provenance] = None
    plan: Optional[GridPlan] = None
    config: InferenceConfig = field(default_factory=InferenceConfig)
    #: the workers' attention as the plan chose it, with its proof
    attention: Optional[AttentionChoice] = None
    #: the plan's notes (host RAM, attention), one line each
    notes: list[str] = field(default_factory=list)
    outputs: dict[str, CardOutputs] = field(default_factory=dict)
    diagnoses: dict[str, Triage] = field(default_factory=dict)

    @property
    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=COLUMNS)

    @property
    def counts(self) -> dict[str, int]:
        return {s: int((self.frame["status"] == s).sum()) for s in STATUSES}

    @property
    def consistency_line(self) -> str:
        """One sentence on whether the cards agree."""
        frame = self.frame
        ok = frame[frame["status"] == "ok"]
        if ok.empty:
            # Say why: the first card's error is usually every card's (a bad argument).
            errors = [str(e) for e in frame["error"] if isinstance(e, str) and e.strip()]
            why = f" Card {int(frame.iloc[0]['card'])}: {errors[0].strip().splitlines()[0][:300]}" \
                if errors and len(frame) else ""
            return f"No card finished, so there is nothing to compare.{why}"
        _, differing, reference = consistency(frame)
        reference = (reference or "")[:12]
        return _agreement(self, ok, differing, reference) + _not_applicable(ok)

    def log_tail(self, card: int, lines: int = 40) -> str:
        row = self.frame.loc[self.frame["card"] == card]
        if row.empty:
            raise KeyError(f"card={card}: not in this grid (cards {list(self.frame['card'])})")
        path = row.iloc[0]["log_path"]
        return read_log_tail(path, lines) if given(path) else "(not launched: no log)"

    def sample_answer(self) -> Optional[tuple[Any, str]]:
        """``(card, answer)`` of the first card that answered the single prompt, or None."""
        for key in sorted(self.outputs, key=lambda k: (len(str(k)), str(k))):
            if self.outputs[key].single:
                return (int(key) if str(key).isdigit() else key), self.outputs[key].single
        return None

    def to_dict(self) -> dict:
        """The record: the fields, the cards' agreement in words and their counts by status."""
        return {**fields_of(self), "consistency": self.consistency_line, "counts": self.counts}


def given(value: Any) -> bool:
    """A table cell holds a value (pandas turns a missing one into None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def scan_fallbacks(path: os.PathLike | str) -> tuple[int, list[str]]:
    """Count torch_npu's CPU-fallback warnings in a log; the operators they name."""
    path = Path(path)
    if not path.is_file():
        return 0, []
    text = path.read_text(encoding="utf-8", errors="replace")
    ops = sorted(set(_FALLBACK_OP_RE.findall(text)))
    return text.count(FALLBACK_MARKER), ops


def consistency(frame: pd.DataFrame) -> tuple[bool, list[int], Optional[str]]:
    """``(consistent, differing cards, reference hash)`` of the ok cards' output hashes: the
    reference is the most common (ties: the lowest card's); no ok card: not consistent."""
    ok = frame[frame["status"] == "ok"].sort_values("card")
    if ok.empty:
        return False, [], None
    counts = ok["output_hash"].value_counts()
    top = counts.max()
    reference = next(h for h in ok["output_hash"] if counts[h] == top)
    differing = [int(c) for c, h in zip(ok["card"], ok["output_hash"]) if h != reference]
    return not differing, differing, reference


def _not_applicable(ok: pd.DataFrame) -> str:
    """What of the configured inference this model could not run (the same on every card)."""
    parts = next((list(v) for v in ok["not_applicable"] if isinstance(v, list) and v), [])
    return f" Not applicable to this model: {'; '.join(parts)}." if parts else ""


def _agreement(result: GridResult, ok: pd.DataFrame, differing: list[int], reference: str) -> str:
    sampling = float(result.config.temperature or 0.0) > 0
    note = " (sampling is on, so differences may be legitimate)" if sampling else ""
    if not differing:
        if len(ok) == 1:
            card = int(ok.iloc[0]["card"])
            return f"Only card {card} finished (output hash {reference}); nothing to compare."
        return f"All {len(ok)} finished cards produced identical outputs (hash {reference}){note}."
    return (f"Cards {', '.join(map(str, differing))} differ from the majority output "
            f"(hash {reference}, {len(ok) - len(differing)} of {len(ok)} cards){note}.")
