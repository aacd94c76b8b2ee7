"""Where a table cell of a page may break a line: at its spaces, and in a long token only
where a ``<wbr>`` is put (after ``_`` or ``/``, after a dotted name's dot), never inside a
number or a word, so that a wide table prints whole with its figures whole (the pages'
print CSS turns the browser's own breaking inside words off)."""

from __future__ import annotations

import re

#: A table from its start to its first row's end; a first row's cells.
_TABLE = re.compile(r"<table\b[^>]*>.*?</tr>", re.S)
_ROW = re.compile(r"<tr\b.*?</tr>", re.S)
_HEAD_CELL = re.compile(r"<t[hd]\b")
#: A table this wide is printed in a smaller font (``table[data-hy-wide]`` in the pages' CSS).
WIDE_COLUMNS = 10
WIDE = "hy-wide"
_CELL = re.compile(r"(<t[hd]\b[^>]*>)(.*?)(</t[hd]>)", re.S)
_TEXT = re.compile(r"(^|>)([^<]+)")
_TOKEN = re.compile(r"\S+")
#: After ``_`` (``decode_tokens_per_s``), after a ``/`` or a ``.`` before a letter (a path,
#: ``layers.1.self_attn.q_proj``); never inside a number (``171/0/0``, ``6.7093``).
_BREAK_AFTER = re.compile(r"(?<=_)(?=\w)|(?<=[/.])(?=[A-Za-z])")
#: Characters after which a browser breaks inside a word (Unicode line breaking): a piece
#: holding one is kept whole (``2.38e-07``, ``npu-emulated``, ``|Δ``).
_BREAKS_INSIDE = re.compile(r"[-‐–—|?!%}\]/]")
#: The class that keeps a piece whole (``white-space: nowrap``, in every page's CSS).
WHOLE = "hy-nb"


def breakable_cells(page: str) -> str:
    """``page`` with every table cell's text made :func:`breakable`, its tags untouched, and
    each table of :data:`WIDE_COLUMNS` columns or more marked :data:`WIDE` (a smaller font in print)."""
    page = _TABLE.sub(lambda m: _marked_wide(m.group(0)), page)
    return _CELL.sub(lambda m: m.group(1) + breakable(m.group(2)) + m.group(3), page)


def _marked_wide(table: str) -> str:
    first_row = _ROW.search(table)
    if first_row is None or len(_HEAD_CELL.findall(first_row.group(0))) < WIDE_COLUMNS:
        return table
    return table.replace("<table", f'<table data-{WIDE}=""', 1)


def breakable(cell: str) -> str:
    """A cell's HTML with a ``<wbr>`` where a long token may break and each piece between
    them that a browser would break inside kept whole."""
    return _TEXT.sub(lambda m: m.group(1) + _TOKEN.sub(_token, m.group(2)), cell)


def _token(match: re.Match) -> str:
    pieces = _BREAK_AFTER.split(match.group(0))
    # a piece's last "/" is where its <wbr> is: only a break inside the piece counts
    return "<wbr>".join(f'<span class="{WHOLE}">{p}</span>' if _BREAKS_INSIDE.search(p[:-1] if p.endswith("/") else p)
                        else p for p in pieces)
