"""Display helpers shared by the notebooks: tables that fit the pane (:func:`styled`,
:func:`fit`), verdict colouring and live, rate-limited output (as transformers'
``NotebookProgressCallback``: one ``display_id`` handle; under papermill the last update is
what the saved notebook keeps).
"""

from __future__ import annotations

import difflib
import html
import io
import re
import os
import time
from typing import Any, Optional

from hyport_lib.results import RUN_DIR_ENV

#: Background colours per verdict / status, shared by every table in the workbook.
VERDICT_COLOURS = {
    "PASS": "#c8e6c9", "OK": "#c8e6c9",
    "WARN": "#fff3c4", "REFUSED": "#fff3c4", "SKIP": "#e0e0e0", "SKIPPED-BUSY": "#e0e0e0", "SKIPPED": "#e0e0e0",
    "FAIL": "#ffcdd2", "FAILED": "#ffcdd2", "TIMEOUT": "#ffcdd2", "ERROR": "#ffcdd2",
    "PENDING": "#eeeeee", "NOT RUN": "#eeeeee", "RUNNING": "#bbdefb", "INTERRUPTED": "#ffe0b2",
}


#: The MIME type of a Vega-Lite spec, which JupyterLab draws with the renderer it ships.
VEGA_LITE_MIME = "application/vnd.vegalite.v5+json"
#: What a missing value (None, NaN) shows as in every table: pandas would print ``None``/``nan``.
MISSING = "–"
#: Widest a table cell grows before its text wraps (JupyterLab's own CSS sets ``max-width: none``).
CELL_MAX_WIDTH = "24em"
#: The cells' style: long text wraps, a path or hash without spaces too, once it reaches the
#: width (``break-word``, not ``anywhere``: that would let the browser squeeze every number
#: into a column one character wide rather than scroll).
_CELL_PROPS = (f"max-width: {CELL_MAX_WIDTH}; white-space: normal; overflow-wrap: break-word; "
               "vertical-align: top")


def verdict_colour(value: Any) -> str:
    colour = VERDICT_COLOURS.get(str(value).upper())
    return f"background-color: {colour}" if colour else ""


def verdict_label(verdict: Any, text: Any = None) -> str:
    """``verdict`` as a coloured label (HTML, also inside Markdown) reading ``text`` (the
    verdict itself by default): text, never an emoji, which without an emoji font is an
    empty box."""
    key = str(verdict).upper()
    colour = VERDICT_COLOURS.get(key, "#eeeeee")
    return (f'<span style="background:{colour};padding:1px 6px;border-radius:3px">'
            f"<b>{html.escape(key if text is None else str(text))}</b></span>")


def styled(df, colour=(), cell_colour=verdict_colour):
    """The one way a table is styled: no index, text escaped, ``None``/NaN as :data:`MISSING`,
    cells wrapped at :data:`CELL_MAX_WIDTH`, the ``colour`` columns coloured by
    ``cell_colour`` (a verdict's colour by default). Chain ``.format(..., na_rep=MISSING)``
    for columns of their own, and show it with :func:`fit`."""
    styler = df.style.format(na_rep=MISSING, escape="html").hide(axis="index")
    styler = styler.set_table_styles([{"selector": "td, th", "props": _CELL_PROPS}], overwrite=False)
    # A header breaks after its underscores (``packed_max_abs_logits``), not only at spaces.
    styler = styler.format_index(lambda name: html.escape(str(name)).replace("_", "_<wbr>"), axis=1)
    present = [c for c in colour if c in df.columns]
    return styler.map(cell_colour, subset=present) if present else styler


class FittedTable:
    """A styled table in a box as wide as the pane that scrolls sideways when the table
    is wider still: what notebooks display, and the report keeps (its HTML)."""

    def __init__(self, styler):
        self.styler = styler

    @property
    def data(self):
        return self.styler.data

    def to_html(self) -> str:
        return (f'<div class="hyport-table" style="overflow-x: auto; max-width: 100%">'
                f"{self.styler.to_html()}</div>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:  # a console or a text-only front end
        return self.styler.data.to_string(index=False, na_rep=MISSING)


def fit(table) -> FittedTable:
    """``table`` (a DataFrame, or a Styler from :func:`styled`) ready to display."""
    import pandas as pd

    return FittedTable(styled(table) if isinstance(table, pd.DataFrame) else table)


def explore(df, sort_by: Optional[str] = None, descending: bool = True, query: str = ""):
    """The rows of ``df`` holding ``query`` (case-insensitive, in any column's text), sorted
    by the column ``sort_by`` (missing values last; None: as listed)."""
    view = df
    if query.strip():
        needle = query.strip().lower()
        hit = df.astype(str).apply(lambda col: col.str.lower().str.contains(needle, regex=False)).any(axis=1)
        view = df[hit]
    if sort_by is None:
        return view
    if sort_by not in df.columns:
        raise ValueError(f"sort_by={sort_by!r}: no such column (have: {list(df.columns)})")
    try:
        return view.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable")
    except TypeError:  # numbers and text in one column: ordered as text
        return view.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable",
                                key=lambda col: col.map(lambda v: None if _missing(v) else str(v)))


def _missing(value: Any) -> bool:
    """None or NaN (a float's NaN compares unequal to itself)."""
    return value is None or (isinstance(value, float) and value != value)


def table_explorer(df, style=styled, what: str = "rows", max_height: str = "28em"):
    """A sort-by dropdown, an order checkbox and a filter box above ``df`` (redrawn on each
    change) for JupyterLab: an ipywidgets ``VBox``. Widgets are not in the report: show a
    static table as well. ``style`` turns a frame into a Styler (:func:`styled`)."""
    import ipywidgets as widgets

    # "as listed" is an object of its own, not None: ipywidgets reads a None value as no
    # choice at all, and the dropdown shows blank
    as_listed = object()
    sort = widgets.Dropdown(options=[("as listed", as_listed)] + [(str(c), c) for c in df.columns],
                            value=as_listed, description="Sort by")
    descending = widgets.Checkbox(value=True, description="largest first", indent=False)
    query = widgets.Text(placeholder="text in any column", description="Filter")
    count, table = widgets.HTML(), widgets.HTML()

    def render(_=None) -> None:
        view = explore(df, None if sort.value is as_listed else sort.value, descending.value, query.value)
        count.value = f"{len(view)} of {len(df)} {html.escape(what)}"
        table.value = (f'<div style="max-height: {max_height}; overflow-y: auto">'
                       f"{fit(style(view)).to_html()}</div>")

    for control in (sort, descending, query):
        control.observe(render, names="value")
    render()
    box = widgets.VBox([widgets.HBox([sort, descending, query, count]), table])
    box.controls, box.table, box.count = (sort, descending, query), table, count
    return box


def explorable_table(df, style=styled, what: str = "rows", limit: int = 10,
                     report_limit: Optional[int] = None) -> list:
    """What to display for ``df`` (a ``str`` is a line of Markdown): up to ``limit`` rows, a
    static table; past that, in JupyterLab, an explorer of every row (:func:`table_explorer`)
    over a static copy of the first ``limit`` (what a notebook saved without its widget
    state still shows). Under ``hyport report`` (the page keeps no widget) the static table
    is whole, or its first ``report_limit`` rows when given, with a line saying so."""
    if os.environ.get(RUN_DIR_ENV):
        if report_limit is None or len(df) <= report_limit:
            return [fit(style(df))]
        limit, where = report_limit, "every one in the stage's record and the notebook's explorer"
    elif len(df) <= limit:
        return [fit(style(df))]
    else:
        where = "every one in the explorer above"
    shown = [fit(style(df.head(limit)))]
    explorer = [] if os.environ.get(RUN_DIR_ENV) else [table_explorer(df, style, what=what)]
    return [*explorer, f"The first {limit} of {len(df)} {what} ({where}):", *shown]


def png_bytes(fig, dpi: int = 100) -> bytes:
    """A matplotlib figure as PNG, cropped to what it draws: every figure hyport writes or shows."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def figure_png(fig, dpi: int = 100):
    """A matplotlib figure as an IPython PNG image; the figure is closed (pyplot keeps it otherwise)."""
    import matplotlib.pyplot as plt
    from IPython.display import Image

    data = png_bytes(fig, dpi)
    plt.close(fig)
    return Image(data=data, format="png")


class LiveDisplay:
    """One display handle, updated at most every ``min_interval_s`` seconds (``force``: the
    final state, always)."""

    def __init__(self, min_interval_s: float = 1.0):
        self.min_interval_s = min_interval_s
        self._handle = None
        self._last = 0.0

    def due(self) -> bool:
        """Would :meth:`update` refresh now (nothing shown yet, or the interval passed)?"""
        return self._handle is None or time.monotonic() - self._last >= self.min_interval_s

    def update(self, obj: Any, force: bool = False, started: Optional[float] = None) -> bool:
        """Show ``obj``; returns True when the display was actually refreshed. ``started``
        (``time.monotonic()`` when ``obj`` began to be made): the interval counts from then, so
        a picture that takes a second to draw on a loaded host is still redrawn every interval."""
        from IPython.display import display

        if not force and not self.due():
            return False
        if self._handle is None:
            self._handle = display(obj, display_id=True)
        else:
            self._handle.update(obj)
        self._last = time.monotonic() if started is None else started
        return True


# --------------------------------------------------------------------------- diffs
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_WORD_RE = re.compile(r"\w+|\s+|[^\w\s]")
_REMOVED, _ADDED = ("#ffebee", "#ffcdd2"), ("#e8f5e9", "#a5d6a7")  # (line, changed characters)


def _marked(tokens: list[str], pieces: list[tuple[int, int]], colour: str) -> str:
    """The joined ``tokens`` escaped, the token ranges ``pieces`` on a stronger background."""
    out, at = [], 0
    for start, end in (piece for piece in pieces if piece[1] > piece[0]):
        out += [html.escape("".join(tokens[at:start])),
                f'<span style="background:{colour}">{html.escape("".join(tokens[start:end]))}</span>']
        at = end
    return "".join(out) + html.escape("".join(tokens[at:]))


def _pair_cells(old: Optional[str], new: Optional[str]) -> tuple[str, str]:
    """A removed and an added line side by side, the words that differ marked (by word, not
    character: ``torch.cuda`` → ``accelerator`` would match its stray letters)."""
    if old is None or new is None:
        return (html.escape(old or ""), html.escape(new or ""))
    a, b = _WORD_RE.findall(old), _WORD_RE.findall(new)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return (_marked(a, [(i1, i2) for tag, i1, i2, _, _ in ops if tag != "equal"], _REMOVED[1]),
            _marked(b, [(j1, j2) for tag, _, _, j1, j2 in ops if tag != "equal"], _ADDED[1]))


def _diff_row(left_no, left, right_no, right, left_bg="", right_bg="") -> str:
    number = "color:#888;text-align:right;user-select:none"
    code = "white-space:pre-wrap;overflow-wrap:anywhere;text-align:left"
    return (f'<tr><td style="{number}">{left_no}</td><td style="{code};background:{left_bg or "none"}">'
            f'{left}</td><td style="{number}">{right_no}</td>'
            f'<td style="{code};background:{right_bg or "none"}">{right}</td></tr>')


#: How alike a removed and an added line must be to stand on one row (SequenceMatcher's ratio).
_SAME_LINE = 0.5


def _aligned(removed: list, added: list) -> list[tuple]:
    """Each removed line beside the first added line after the last one placed that is
    like it; the others alone on their side. Items: ``(line number, text)``."""
    pairs, j = [], 0
    for old in removed:
        k = next((k for k in range(j, len(added))
                  if difflib.SequenceMatcher(None, old[1], added[k][1]).ratio() > _SAME_LINE), None)
        if k is None:
            pairs.append((old, (None, None)))
            continue
        pairs += [((None, None), new) for new in added[j:k]] + [(old, added[k])]
        j = k + 1
    return pairs + [((None, None), new) for new in added[j:]]


def _flush(rows: list[str], removed: list[tuple[int, str]], added: list[tuple[int, str]]) -> None:
    """A run of removed lines beside the run of added ones that replaced them."""
    for old, new in _aligned(removed, added):
        left, right = _pair_cells(old[1], new[1])
        rows.append(_diff_row("" if old[0] is None else old[0], left, "" if new[0] is None else new[0], right,
                              _REMOVED[0] if old[1] is not None else "", _ADDED[0] if new[1] is not None else ""))
    removed.clear()
    added.clear()


def diff_html(unified: str) -> str:
    """A unified diff (``git diff``, ``port.diff``) side by side: before on the left, after
    on the right, the changed characters of a changed line marked, long lines wrapped; one
    table per file, in a box as wide as the pane. Offline: plain HTML and inline styles."""
    tables, rows = [], []
    removed: list[tuple[int, str]] = []
    added: list[tuple[int, str]] = []
    old_no = new_no = left = 0  # ``left``: the current hunk's lines not read yet (old + new)
    head = ""
    for line in unified.splitlines():
        match = _HUNK_RE.match(line)
        if left <= 0 and line.startswith("--- "):
            _flush(rows, removed, added)
            if rows:
                tables.append((head, rows))
            head, rows = html.escape(line[4:]), []
        elif left <= 0 and line.startswith("+++ "):
            head += f" → {html.escape(line[4:])}"
        elif match:
            _flush(rows, removed, added)
            old_no, new_no = int(match[1]), int(match[3])
            left = int(match[2] or 1) + int(match[4] or 1)
            rows.append(f'<tr><td colspan="4" style="color:#555;background:#f0f4ff;text-align:left">'
                        f"{html.escape(line)}</td></tr>")
        elif left > 0 and line[:1] == "-":
            removed.append((old_no, line[1:]))
            old_no, left = old_no + 1, left - 1
        elif left > 0 and line[:1] == "+":
            added.append((new_no, line[1:]))
            new_no, left = new_no + 1, left - 1
        elif left > 0 and line[:1] == " ":
            _flush(rows, removed, added)
            rows.append(_diff_row(old_no, html.escape(line[1:]), new_no, html.escape(line[1:])))
            old_no, new_no, left = old_no + 1, new_no + 1, left - 2
    _flush(rows, removed, added)
    if rows:
        tables.append((head, rows))
    return "".join(
        f'<div class="hyport-table" style="overflow-x:auto;max-width:100%;margin-bottom:1em">'
        f'<table style="font-family:monospace;font-size:90%;border-collapse:collapse;width:100%;'
        f'table-layout:fixed"><colgroup><col style="width:3.5em"><col><col style="width:3.5em"><col>'
        f'</colgroup><tr><th colspan="4" style="text-align:left">{name}</th></tr>'
        + "".join(body) + "</table></div>" for name, body in tables)
