"""Stage 04's answers before and after training (:mod:`hyport_lib.train.held_answers`) as the
notebook, the index card and the drafts show them."""

from __future__ import annotations

from typing import Optional

from hyport_lib.drafting.draft import Draft
from hyport_lib.drafting.markdown import recorded, table
from hyport_lib.drafting.values import as_dict, as_list
from hyport_lib.results import StageRecord
from hyport_lib.train.phrases import PHRASES
from hyport_lib.train.result import TrainResult

#: Longest text shown in a table cell (the record keeps all of it).
CELL_CHARS = 120


def _cell(text) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def held_of(record: dict) -> dict:
    """The recorded answers (empty for a run made before they were recorded)."""
    return as_dict(StageRecord.from_dict(record, TrainResult).data.worker.get("held_answers"))


def answers_frame(held: Optional[dict]):
    """One row per held prompt: the prompt, the data's answer, before and after."""
    import pandas as pd

    held = as_dict(held)
    columns = ("prompt", "taught", "before", "after")
    values = {c: as_list(held.get(c if c != "prompt" else "prompts")) for c in columns}
    return pd.DataFrame([{c: _cell(values[c][i]) if i < len(values[c]) else "" for c in columns}
                         for i in range(len(values["prompt"]))], columns=list(columns))


def glance_row(record: dict) -> list[tuple[str, str]]:
    held = held_of(record)
    if not held:
        return []
    if held.get("why_not"):
        return [("answers", str(held["why_not"]))]
    before, after = as_list(held.get("before")), as_list(held.get("after"))
    if not after:
        return []
    rows = [("asked", _cell(as_list(held.get("prompts"))[0]))] if as_list(held.get("prompts")) else []
    if before:
        rows.append(("answer before", _cell(before[0])))
    return rows + [("answer after", _cell(after[0]))]


def blog_lines(record: dict, draft: Draft) -> list[str]:
    t = draft.phrases(PHRASES)
    held = held_of(record)
    if not held:
        return []
    if held.get("why_not"):
        return [t["answers_not"].format(why=recorded(held["why_not"], draft.lang)), ""]
    frame = answers_frame(held)
    cells = [[recorded(cell, draft.lang) for cell in row] for row in frame.itertuples(index=False)]
    return [t["answers_intro"], ""] + table([t["ans_prompt"], t["ans_taught"], t["ans_before"], t["ans_after"]],
                                              cells)
