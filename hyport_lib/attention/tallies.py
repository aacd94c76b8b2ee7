"""Tallies of the attention comparison's recorded rows, for the report's card and draft.

The rows are read as recorded (``results/02_attention.json``: ``data.rows``), so an
older or half-written record still gives what it holds; a row whose output held NaN or
Inf has ``finite`` false and its ``max_abs`` recorded as null (strict JSON), and counts
as worse than any finite error.
"""

from __future__ import annotations

import math
from typing import Optional

from hyport_lib.drafting.values import is_number

_VERDICTS = ("PASS", "WARN", "FAIL", "SKIP")


def case_tally(rows: list[dict]) -> tuple[int, int, Optional[dict]]:
    """``(cases passed, cases, worst row)``: a case passes when every implementation passed
    it; the worst row has the largest ``max_abs / bound`` (None when no row was judged)."""
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(str(r.get("case")), []).append(r)
    passed = sum(1 for case in by_case.values() if all(r.get("verdict") == "PASS" for r in case))
    judged = [r for r in rows if r.get("bound") and r.get("max_abs") is not None]
    worst = max(judged, key=lambda r: r["max_abs"] / r["bound"], default=None)
    return passed, len(by_case), worst


def backend_rows(rows: list[dict]) -> list[dict]:
    """Per implementation, in the recorded order: where it ran, its rows per verdict, its
    largest ``max_abs`` and its worst ``max_abs / bound``."""
    out: dict[str, dict] = {}
    for r in rows:
        if not isinstance(r, dict) or not r.get("backend"):
            continue
        entry = out.setdefault(r["backend"], {"name": r["backend"], "source": r.get("source"),
                                              "rows": 0, "max_abs": None, "ratio": None,
                                              **{v: 0 for v in _VERDICTS}})
        entry["rows"] += 1
        if r.get("verdict") in _VERDICTS:
            entry[r["verdict"]] += 1
        value, bound = r.get("max_abs"), r.get("bound")
        if r.get("finite") is False:  # NaN / Inf in the output (its max_abs was recorded as null)
            value = math.inf
        if is_number(value):
            entry["max_abs"] = value if entry["max_abs"] is None else max(entry["max_abs"], value)
            if is_number(bound) and bound:
                share = value / bound
                entry["ratio"] = share if entry["ratio"] is None else max(entry["ratio"], share)
    return list(out.values())
