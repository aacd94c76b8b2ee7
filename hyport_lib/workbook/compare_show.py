"""A :class:`~hyport_lib.workbook.compare.Comparison` shown: tables with the runs as columns,
the stages' figures, one offline page for ``hyport compare``, and a run picker in JupyterLab.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import pandas as pd

from hyport_lib.display import MISSING, VEGA_LITE_MIME, png_bytes, verdict_colour
from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.workbook.compare import Comparison, Part, Run, compare_runs, list_runs, presence, summarize_run

#: The page's file name in a run folder.
COMPARE_PAGE = "compare.html"


#: A stage's cell where its record holds no verdict; where its record is unreadable.
NO_VERDICT = "no verdict"
UNREADABLE = "unreadable"


def overview_table(c: Comparison) -> pd.DataFrame:
    """Stage by run: ``VERDICT: summary`` (``unreadable``: the record is); ``difference``: the
    runs' verdicts and summaries differ (a stage run two ways), are the same, or the stage
    is only in some runs (``only in A (…)``) or unreadable in one (``unreadable in A (…)``)."""
    unreadable = pd.DataFrame([{"stage": stage, "run": run, "cell": UNREADABLE} for run, stage in c.unreadable],
                              columns=["stage", "run", "cell"])
    if c.overview.empty and unreadable.empty:
        return pd.DataFrame()
    # Text, never a missing value: a stage whose record holds no verdict keeps its row.
    cells = c.overview.assign(cell=c.overview["verdict"].fillna(NO_VERDICT).astype(str) + ": "
                              + c.overview["summary"].map(_text))
    stages = {s: i for i, s in enumerate(c.stages)}
    cells = pd.concat([cells, unreadable], ignore_index=True).sort_values("stage", key=lambda s: s.map(stages),
                                                                          kind="stable")
    wide = _by_run(c, cells, ["stage"], "cell")
    readable = cells[cells["cell"] != UNREADABLE]
    rows = [readable[readable["stage"] == stage] for stage in wide.index]
    return wide.assign(difference=[_difference(c, stage, [run for run in c.runs if run.id in set(r["run"])], c.runs,
                                               list(r["cell"])) for stage, r in zip(wide.index, rows)]).fillna(MISSING)


def _by_run(c: Comparison, frame: pd.DataFrame, index: list[str], values: str) -> pd.DataFrame:
    """``frame`` with the runs as columns, in the comparison's order; a row for every key
    ``frame`` holds, a value missing in every run too (NaN where a run has none)."""
    wide = frame.pivot_table(index=index, columns="run", values=values, aggfunc="first", sort=False)
    keys = pd.MultiIndex.from_frame(frame[index]).unique() if len(index) > 1 else pd.Index(frame[index[0]]).unique()
    ids = set(frame["run"])
    return wide.reindex(index=keys, columns=pd.Index([r.id for r in c.runs if r.id in ids], name="run"))


def _difference(c: Comparison, stage: str, have: list[Run], runs: list[Run], values: list) -> str:
    """:func:`presence` of a row of ``stage`` that ``have`` of ``runs`` have (``values``:
    theirs); ``unreadable in A (…)`` where a run's record of the stage is there but unreadable."""
    unreadable = [r for r in runs if r not in have and (r.id, stage) in c.unreadable]
    if unreadable:
        return "unreadable in " + ", ".join(r.tag for r in unreadable)
    return presence(have, runs, values)


def _with_difference(c: Comparison, wide: pd.DataFrame, frame: pd.DataFrame,
                     among: Optional[list] = None) -> pd.DataFrame:
    """``wide`` (``frame`` by run, the stage first in its index) and its ``difference`` column.
    Per row, ``among``: the runs that count (default every run); those that have the row: a
    value there (None in one run is no difference: the other has it alone), else, where no
    run has one, those that recorded it (None in every run that did: the same)."""
    recorded = frame.groupby(list(wide.index.names), sort=False)["run"].apply(set)
    notes = []
    for i, (key, row) in enumerate(wide.iterrows()):
        runs = [r for r in c.runs if among is None or r.id in among[i]]
        have = [r for r in runs if pd.notna(row.get(r.id))] or [r for r in runs if r.id in recorded[key]]
        notes.append(_difference(c, key[0], have, runs, [None if pd.isna(row.get(r.id)) else row[r.id] for r in have]))
    return wide.assign(difference=notes)


def headline_table(c: Comparison) -> pd.DataFrame:
    """(stage, figure) by run, and whether the runs differ there (or only some have it)."""
    if c.headlines.empty:
        return pd.DataFrame()
    # None stays missing through the pivot (a figure one run lacks), "–" only once compared.
    values = c.headlines.assign(value=c.headlines["value"].map(lambda v: None if v is None else str(v)))
    wide = _by_run(c, values, ["stage", "key"], "value").astype(object)  # a figure no run has: not float NaN
    return _with_difference(c, wide, values).fillna(MISSING)


def throughput_table(c: Comparison) -> pd.DataFrame:
    """(stage, measure) by run: tokens/s; ``difference`` as in :func:`headline_table`."""
    if c.throughput.empty:
        return pd.DataFrame()
    return _with_difference(c, _by_run(c, c.throughput, ["stage", "measure"], "tokens_per_s").round(1), c.throughput)


def parameter_table(c: Comparison) -> pd.DataFrame:
    """(stage, parameter) by run, where the runs that recorded the stage's parameters differ,
    or a parameter is only in some of them (a stage only one run has is the verdicts' row)."""
    if c.parameters.empty:
        return pd.DataFrame()
    wide = _by_run(c, c.parameters, ["stage", "parameter"], "value")
    # Only among the runs that recorded the stage's parameters (an older record holds none).
    recorded = c.parameters.groupby("stage")["run"].unique()
    wide = _with_difference(c, wide, c.parameters, [list(recorded[stage]) for stage, _ in wide.index])
    shown = [note != "same" and len(recorded[stage]) > 1 for (stage, _), note in zip(wide.index, wide["difference"])]
    return wide[shown].fillna(MISSING)


def _text(value: Any) -> str:
    return MISSING if value is None else str(value)


def run_lines(c: Comparison) -> list[str]:
    """Letter and name (as the tables' headers call it), id, kind, where its figures came
    from (per stage when they differ)."""
    lines = []
    for run in c.runs:
        labels = c.overview[c.overview["run"] == run.id]["source"].unique()
        where = "; ".join(labels) or "no record compared"
        lines.append(f"{run.letter}: {run.title}, run {run.id} ({run.kind} run, {', '.join(run.stages)}): {where}")
    return lines


def figure_png(part: Part) -> Optional[bytes]:
    fig = part.figure() if part.figure is not None else None
    return None if fig is None else png_bytes(fig)


def _table_html(frame: pd.DataFrame, c: Comparison, empty: str = "") -> str:
    if frame.empty:
        return f"<p class='none'>{html.escape(empty or 'nothing to compare')}</p>"
    frame = frame.rename(columns=lambda col: _run_header(str(col), c))
    # Recorded text is escaped (a parameter "<run>/train", a summary with "<"), the index too.
    # a cell "VERDICT: summary" is coloured by its verdict
    return frame.style.map(lambda v: verdict_colour(str(v).split(":", 1)[0].strip())).format(na_rep=MISSING, precision=1, escape="html") \
        .format_index(escape="html", axis=0).format_index(escape="html", axis=1).to_html()


def _run_header(column: str, c: Comparison) -> str:
    """A column named by a run id (``<id>``, ``<id> source``) named as the runs list names it."""
    for run in c.runs:
        if column == run.id or column.startswith(run.id + " "):
            return run.tag + column[len(run.id):]
    return column


class Section(NamedTuple):
    """A part of the view: its HTML (a figure's: its PNG, ``png`` in base64, and ``figure``
    the stage's part, which may also hold an interactive spec)."""

    title: str
    html: str
    figure: Optional[Part] = None
    png: str = ""


def sections(c: Comparison) -> list[Section]:
    """Each part with something to show, in reading order."""
    parts = [Section("Runs", "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in run_lines(c)) + "</ul>"),
             Section("Verdict of every stage", _table_html(overview_table(c), c))]
    for part in c.parts:  # a figure first: what to look at when two runs differ
        png = figure_png(part)
        if png is not None:
            encoded = base64.b64encode(png).decode()
            parts.append(Section(part.title, f"<img alt='{html.escape(part.title)}' src="
                                             f"'data:image/png;base64,{encoded}'>", part, encoded))
    tables = []
    if not c.headlines.empty:
        tables.append(("Headline figures (difference: differs, same, or only in some runs)",
                       _table_html(headline_table(c), c)))
    if not c.parameters.empty:
        tables.append(("Parameters that differ", _table_html(parameter_table(c), c)))
    if not c.throughput.empty:
        tables.append(("Tokens/s side by side", _table_html(throughput_table(c), c)))
    tables += [(part.title, _table_html(part.frame, c, part.empty)) for part in c.parts if part.figure is None]
    if c.notes:
        tables.append(("Notes", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in c.notes) + "</ul>"))
    return parts + [Section(title, body) for title, body in tables]


def comparison_html(c: Comparison) -> str:
    """One offline page (no script, the figure inline): what ``hyport compare`` writes."""
    body = "".join(f"<h2>{html.escape(s.title)}</h2>{s.html}" for s in sections(c))
    title = html.escape("hyport compare: " + " vs ".join(r.tag for r in c.runs))
    style = ("body{font-family:sans-serif;margin:1.5em;max-width:80em}table{border-collapse:collapse;font-size:90%}"
             "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
             "div.wrap{overflow-x:auto}img{max-width:100%}")
    # Wide tables scroll inside their own box, not the page.
    body = body.replace("<table", "<div class=wrap><table").replace("</table>", "</table></div>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body><h1>{title}</h1>{body}</body></html>")


def write_compare_page(c: Comparison, path: os.PathLike, rewrite: Callable[[str], str] = str) -> Path:
    """Through ``rewrite``: the command names local folders as the report does."""
    return atomic_write_text(path, rewrite(comparison_html(c)))


def show_comparison(c: Comparison) -> None:
    """In a notebook: the same parts as the page (the stages' figures after the verdicts), a
    figure with a Vega-Lite spec interactive in JupyterLab (hover, zoom, a legend per run),
    its PNG wherever no Vega renderer is (nbconvert, a saved notebook elsewhere)."""
    from IPython.display import HTML, display

    for section in sections(c):
        spec = section.figure.spec() if section.figure is not None and section.figure.spec is not None else None
        if spec is None:
            display(HTML(f"<h4>{html.escape(section.title)}</h4><div style='overflow-x:auto'>{section.html}</div>"))
            continue
        display(HTML(f"<h4>{html.escape(section.title)}</h4>"))
        display({VEGA_LITE_MIME: spec, "image/png": section.png,
                 "text/plain": f"<{section.title}: hover and zoom in JupyterLab>"}, raw=True)


def show_compare(*refs: Any, stages=None, outputs: Optional[os.PathLike] = None) -> Comparison:
    c = compare_runs(refs, stages=stages, outputs=Path(outputs) if outputs else None)
    show_comparison(c)
    return c


def run_picker(outputs: Optional[os.PathLike] = None, stage: Optional[str] = None):
    """Two run pickers, Compare and Refresh (a run recorded since shows up). ``stage``: only
    the runs that recorded it, compared on it."""
    import ipywidgets as widgets

    first = widgets.Dropdown(description="run", layout={"width": "46em"})
    second = widgets.Dropdown(description="with", layout={"width": "46em"})
    button = widgets.Button(description="Compare", button_style="primary")
    refresh = widgets.Button(description="Refresh", tooltip="list the recorded runs again")
    # The one-line error in a widget of its own: it shows whatever the Output area captures.
    note = widgets.HTML()
    out = widgets.Output()

    def list_again(_=None) -> None:
        runs = [r for r in list_runs(Path(outputs) if outputs else None) if stage is None or stage in r.stages]
        options = [(summarize_run(r).label, r.id) for r in runs]
        first.options, second.options = options, options
        # The newest two: after a Refresh, the run just recorded beside the one before it.
        first.value = options[0][1] if options else None
        second.value = options[1][1] if len(options) > 1 else None
        note.value = "" if len(runs) > 1 else "<i>fewer than two recorded runs: run a stage twice</i>"

    def compare(_=None) -> None:
        out.clear_output()
        note.value = ""
        with out:
            try:
                show_compare(first.value, second.value, stages=[stage] if stage else None, outputs=outputs)
            except ValueError as exc:
                note.value = f"<span style='color:#b00020'>{html.escape(str(exc))}</span>"

    list_again()
    button.on_click(compare)
    refresh.on_click(list_again)
    picker = widgets.VBox([first, second, widgets.HBox([button, refresh]), note, out])
    picker.add_class("hyport-compare")
    return picker


def show_run_picker(outputs: Optional[os.PathLike] = None, stage: Optional[str] = None):
    """Under ``hyport report`` (headless): nothing, None (``hyport compare`` writes the same view)."""
    if os.environ.get(RUN_DIR_ENV):
        return None
    from IPython.display import display

    picker = run_picker(outputs, stage)
    display(picker)
    return picker
