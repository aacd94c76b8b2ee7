"""Stage 04's answers before and after training (:mod:`hyport_lib.train.held_answers`) as the
notebook, the index card and the drafts (their table cells) show them."""

from __future__ import annotations

from typing import Optional

from hyport_lib.train.held_answers import HeldAnswers
from hyport_lib.train.result import TrainResult
from hyport_lib.utils.printable import shortened

#: Longest text shown in a table cell (the record keeps all of it).
CELL_CHARS = 120


def held_of(result: TrainResult) -> Optional[HeldAnswers]:
    """The recorded answers (None for a run made before they were recorded)."""
    return result.worker.held_answers if result.worker is not None else None


def answer_cells(held: Optional[HeldAnswers]) -> list[tuple[str, str, str, str]]:
    """One row per held prompt: the prompt, the data's answer, before and after (cut)."""
    if held is None:
        return []
    columns = [held.prompts, held.taught, held.before, held.after]
    return [tuple(shortened(values[i], CELL_CHARS) if i < len(values) else "" for values in columns)
            for i in range(len(columns[0]))]


def answers_frame(held: Optional[HeldAnswers]):
    """The answers (:func:`answer_cells`) as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(answer_cells(held), columns=["prompt", "taught", "before", "after"])


def glance_row(result: TrainResult) -> list[tuple[str, str]]:
    held = held_of(result)
    if held is None:
        return []
    if held.why_not:
        return [("answers", held.why_not)]
    if not held.after:
        return []
    rows = [("asked", shortened(held.prompts[0], CELL_CHARS))] if held.prompts else []
    if held.before:
        rows.append(("answer before", shortened(held.before[0], CELL_CHARS)))
    return rows + [("answer after", shortened(held.after[0], CELL_CHARS))]
