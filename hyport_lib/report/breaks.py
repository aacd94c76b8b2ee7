"""Where a table cell of a page may break a line: at its spaces, and in a long token only
where a ``<wbr>`` is put (after ``_`` or ``/``, after a dotted name's dot), never inside a
number or a word, so that a wide table prints whole with its figures whole (the pages'
print CSS turns the browser's own breaking inside words off)."""

from __future__ import annotations

import re

#: A tag's attributes: a quoted value may hold ``>``.
_ATTRS = r"""(?:[^>"']|"[^"]*"|'[^']*')*"""
#: A page piece by piece: what is kept whole (a comment; a script, style, pre or textarea
#: element with its content: JSON, CSS, preformatted text), a tag, text (a ``<`` that opens
#: nothing is text too).
_PIECE = re.compile(rf"<!--.*?-->|<(script|style|pre|textarea)\b{_ATTRS}>.*?</\1\s*>|</?[A-Za-z]{_ATTRS}>|[^<]+|<",
                    re.S | re.I)
_TAG = re.compile(r"<(/?)([A-Za-z][\w-]*)")
#: A table this wide is printed in a smaller font (``table[data-hy-wide]`` in the pages' CSS).
WIDE_COLUMNS = 10
WIDE = "hy-wide"
_TOKEN = re.compile(r"\S+")
#: After ``_`` before a letter (``decode_tokens_per_s``, not ``1_000_000``), after a ``/`` or
#: a ``.`` before a letter (a path, ``layers.1.self_attn.q_proj``); never inside a number
#: (``171/0/0``, ``6.7093``).
_BREAK_AFTER = re.compile(r"(?<=[_/.])(?=[^\W\d_])")
#: Characters after which a browser breaks inside a word (Unicode line breaking): a piece
#: holding one is kept whole (``2.38e-07``, ``npu-emulated``, ``|Δ``).
_BREAKS_INSIDE = re.compile(r"[-‐–—|?!%}\]/]")
#: The class that keeps a piece whole (``white-space: nowrap``, in every page's CSS).
WHOLE = "hy-nb"


def _tag(piece: str) -> tuple[str, bool]:
    """A tag piece's name (lower case) and whether it closes; ("", False) for anything else."""
    m = _TAG.match(piece) if piece.endswith(">") else None
    return (m.group(2).lower(), m.group(1) == "/") if m else ("", False)


def breakable_cells(page: str) -> str:
    """``page`` with every table cell's text made :func:`breakable`, its tags, scripts,
    styles and preformatted text untouched, and each table of :data:`WIDE_COLUMNS` columns or
    more marked :data:`WIDE` (a smaller font in print)."""
    pieces = [m.group(0) for m in _PIECE.finditer(page)]
    cells = 0  # how deep in table cells (a table in a cell)
    for i, piece in enumerate(pieces):
        name, closing = _tag(piece)
        if name == "table" and not closing:
            pieces[i] = _marked_wide(piece, pieces[i + 1:])
        elif name in ("td", "th"):
            cells = max(cells - 1, 0) if closing else cells + 1
        elif cells and not name and not piece.startswith("<"):
            pieces[i] = _breakable_text(piece)
    return "".join(pieces)


def _marked_wide(table: str, after: list[str]) -> str:
    """The ``<table>`` tag, marked wide when its first row has that many cells."""
    columns = 0
    for piece in after:
        name, closing = _tag(piece)
        if name in ("tr", "table") and closing:
            break
        columns += name in ("td", "th") and not closing
    return table.replace("<table", f'<table data-{WIDE}=""', 1) if columns >= WIDE_COLUMNS else table


def breakable(cell: str) -> str:
    """A cell's HTML with a ``<wbr>`` where a long token may break and each piece between
    them that a browser would break inside kept whole."""
    return "".join(piece if piece.startswith("<") else _breakable_text(piece)
                   for piece in (m.group(0) for m in _PIECE.finditer(cell)))


def _breakable_text(text: str) -> str:
    return _TOKEN.sub(_token, text)


def _token(match: re.Match) -> str:
    pieces = _BREAK_AFTER.split(match.group(0))
    # a piece's last "/" is where its <wbr> is: only a break inside the piece counts
    return "<wbr>".join(f'<span class="{WHOLE}">{p}</span>' if _BREAKS_INSIDE.search(p[:-1] if p.endswith("/") else p)
                        else p for p in pieces)
