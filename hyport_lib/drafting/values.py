"""Recorded values as the report shows them: the drafts' figures (:func:`num`) and the index
cards' (:func:`fmt_value`). The tests re-derive each number of a draft with these rules;
a float is never shown as ``1.235e+04``, and a recorded text is never cut short (cutting
``2048x2048`` could leave a number that was never recorded).
"""

from __future__ import annotations

import math
from typing import Any

#: Floats up to this many characters are shown exactly as recorded.
FLOAT_CHARS = 7
#: What a missing value shows as (no figure, and no digit either).
MISSING = "—"


def num(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return MISSING if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        text = str(value)
        if len(text) <= FLOAT_CHARS:
            return text
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def ratio(value: float) -> str:
    """A ratio the drafts derive: 3 significant digits, as the stage's headline rounds it."""
    return f"{value:.3g}"


def is_number(value: Any) -> bool:
    """``True`` / ``False`` are not figures."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fmt_value(value: Any, digits: int = 4) -> str:
    """On an index card or in the stages table (``—`` when not recorded, never ``None``)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}" if math.isfinite(value) and abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)
