"""How the blog drafts write values: numbers, recorded texts, code, quotations, tables.

The drafts copy every figure from the run's recorded files, so the formatting rules are
few and fixed (the tests re-derive each number with them):

* an integer is written as recorded, with thousands separators from 10,000 on
  (``288536`` -> ``288,536``, as the seed wrote byte counts);
* a float is written as recorded (``str``) when that takes at most
  :data:`FLOAT_CHARS` characters, else rounded to 4 significant digits (``.4g``) below
  1,000 and to one decimal with separators from 1,000 on (``12,345.7``, never
  ``1.235e+04``);
* a ratio the drafts derive themselves (the worst error over its bound, per attention
  implementation) is rounded to 3 significant digits (``.3g``), as the stage's headline;
* a recorded text is never cut short: cutting ``2048x2048`` could leave a number that
  was never recorded.

Recorded texts that are not figures (summaries, errors, paths, model outputs) are shown
as recorded and marked: as code (:func:`code`) or as a quotation (:func:`quote`), so a
reader can tell the frame from what the tools wrote.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

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
    """A ratio the drafts derive (an error over its bound): 3 significant digits, as the
    stage's own headline rounds it."""
    return f"{value:.3g}"


def is_number(value: Any) -> bool:
    """A JSON number (``True`` / ``False`` are not figures)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def code(value: Any) -> str:
    """``value`` as a Markdown code span (backticks inside are fenced by longer ones)."""
    text = " ".join(str(value).split()) if value is not None else MISSING
    if not text:
        return MISSING
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if fence != "`" or text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: Any) -> str:
    """A Markdown table cell: pipes escaped (also inside code spans, as GFM asks), one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def row(*cells: Any) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table (header, rule, rows) as lines, followed by a blank line."""
    header = list(header)
    lines = [row(*header), "|" + "---|" * len(header)]
    lines += [row(*r) for r in rows]
    return lines + [""]


def quote(text: Optional[str]) -> list[str]:
    """A recorded message as a Markdown quotation (every line marked), then a blank line."""
    body = str(text or "").strip("\n")
    if not body:
        return []
    return [f"> {line}".rstrip() for line in body.splitlines()] + [""]


def fenced(text: str, info: str = "") -> list[str]:
    """``text`` in a fenced block long enough never to be closed by what it holds."""
    fence = "```"
    while fence in text:
        fence += "`"
    return [f"{fence}{info}", text.rstrip("\n"), fence, ""]


def recorded(value: Any, lang: str) -> str:
    """A recorded free text for a table cell: plain in English, code in Chinese (so that
    the Chinese draft holds no English outside marked recorded text)."""
    if value is None or value == "":
        return MISSING
    return code(value) if lang == "zh" else " ".join(str(value).split())


__all__ = ["FLOAT_CHARS", "MISSING", "cell", "code", "fenced", "is_number", "num", "quote", "ratio",
           "recorded", "row", "table"]
