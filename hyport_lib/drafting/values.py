"""Recorded values as the report shows them, and safe reading of recorded files.

The report copies every figure from the run's recorded files, so the formatting rules
are few and fixed (the tests re-derive each number with them):

* an integer is written as recorded, with thousands separators from 10,000 on
  (``288536`` -> ``288,536``, as the seed wrote byte counts);
* a float is written as recorded (``str``) when that takes at most
  :data:`FLOAT_CHARS` characters, else rounded to 4 significant digits (``.4g``) below
  1,000 and to one decimal with separators from 1,000 on (``12,345.7``, never
  ``1.235e+04``);
* a ratio the drafts derive (an error over its bound) has 3 significant digits (``.3g``);
* a recorded text is never cut short: cutting ``2048x2048`` could leave a number that
  was never recorded.

:func:`num` writes the drafts' figures, :func:`fmt_value` the index cards'.
"""

from __future__ import annotations

import math
from typing import Any

#: Floats up to this many characters are shown exactly as recorded.
FLOAT_CHARS = 7
#: What a missing value shows as (no figure, and no digit either).
MISSING = "—"


def num(value: Any) -> str:
    """A recorded number as the drafts show it (see the module docstring)."""
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
    """A JSON number (``True`` / ``False`` are not figures)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fmt_value(value: Any, digits: int = 4) -> str:
    """A recorded value on an index card or in the stages table: ``—`` when not recorded
    (never ``None``), bools as yes / no, floats to ``digits`` significant digits below
    1,000 and one decimal with separators above (``12,345.7``, not ``1.235e+04``)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}" if math.isfinite(value) and abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)
