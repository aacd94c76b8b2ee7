"""Markdown of the blog drafts: code spans, table rows, quotations, fenced blocks. Recorded
texts are marked as such, so a reader tells the drafts' own sentences from what tools wrote.
"""

from __future__ import annotations

from typing import Any, Optional

from hyport_lib.drafting.values import MISSING


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
