"""Stage 04's answers before and after training (:mod:`hyport_lib.train.held_answers`) as the
notebook, the index card and the drafts (their table cells) show them."""

from __future__ import annotations

from typing import Optional

from hyport_lib.drafting.values import as_dict, as_list
from hyport_lib.results import StageRecord
from hyport_lib.train.result import TrainResult
from hyport_lib.utils.printable import shortened

#: Longest text shown in a table cell (the record keeps all of it).
CELL_CHARS = 120


def held_of(record: dict) -> dict:
    """The recorded answers (empty for a run made before they were recorded)."""
    return as_dict(StageRecord.from_dict(record, TrainResult).data.worker.get("held_answers"))


def answer_cells(held: Optional[dict]) -> list[tuple[str, str, str, str]]:
    """One row per held prompt: the prompt, the data's answer, before and after (cut)."""
    held = as_dict(held)
    columns = [as_list(held.get(c)) for c in ("prompts", "taught", "before", "after")]
    return [tuple(shortened(values[i], CELL_CHARS) if i < len(values) else "" for values in columns)
            for i in range(len(columns[0]))]


def answers_frame(held: Optional[dict]):
    """The answers (:func:`answer_cells`) as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(answer_cells(held), columns=["prompt", "taught", "before", "after"])


def glance_row(record: dict) -> list[tuple[str, str]]:
    held = held_of(record)
    if not held:
        return []
    if held.get("why_not"):
        return [("answers", str(held["why_not"]))]
    before, after = as_list(held.get("before")), as_list(held.get("after"))
    if not after:
        return []
    rows = [("asked", shortened(as_list(held.get("prompts"))[0], CELL_CHARS))] if as_list(held.get("prompts")) else []
    if before:
        rows.append(("answer before", shortened(before[0], CELL_CHARS)))
    return rows + [("answer after", shortened(after[0], CELL_CHARS))]
