"""A :class:`~hyport_lib.workbook.compare.Comparison` shown: tables with the runs as columns,
the stages' figures, one offline page for ``hyport compare``, and a run picker in JupyterLab.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from hyport_lib.display import MISSING, png_bytes, verdict_colour
from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.workbook.compare import Comparison, Part, compare_runs, list_runs

#: The page's file name in a run folder.
COMPARE_PAGE = "compare.html"


def overview_table(c: Comparison) -> pd.DataFrame:
    """Stage by run: ``VERDICT: summary``."""
    if c.overview.empty:
        return pd.DataFrame()
    cells = c.overview.assign(cell=c.overview["verdict"].astype(str) + ": " + c.overview["summary"].astype(str))
    return cells.pivot(index="stage", columns="run", values="cell").reindex(columns=[r.id for r in c.runs]) \
        .fillna(MISSING).dropna(axis=1, how="all")


def _by_run(c: Comparison, frame: pd.DataFrame, index: list[str], values: str, **options) -> pd.DataFrame:
    """``frame`` with the runs as columns, in the comparison's order."""
    wide = frame.pivot_table(index=index, columns="run", values=values, aggfunc="first", sort=False, **options)
    return wide.reindex(columns=[r.id for r in c.runs if r.id in wide.columns])


def headline_table(c: Comparison) -> pd.DataFrame:
    """(stage, figure) by run, and whether the runs differ there."""
    if c.headlines.empty:
        return pd.DataFrame()
    values = c.headlines.assign(value=c.headlines["value"].map(_text))
    wide = _by_run(c, values, ["stage", "key"], "value").fillna(MISSING)
    wide["differs"] = wide.nunique(axis=1) > 1
    return wide


def throughput_table(c: Comparison) -> pd.DataFrame:
    """(stage, measure) by run: tokens/s."""
    if c.throughput.empty:
        return pd.DataFrame()
    return _by_run(c, c.throughput, ["stage", "measure"], "tokens_per_s", dropna=False).round(1)


def parameter_table(c: Comparison) -> pd.DataFrame:
    """(stage, parameter) by run, where the runs that recorded the stage's parameters differ."""
    if c.parameters.empty:
        return pd.DataFrame()
    wide = _by_run(c, c.parameters, ["stage", "parameter"], "value")
    # Only among the runs that recorded the stage's parameters (an older record holds none).
    recorded = c.parameters.groupby("stage")["run"].unique()
    differs = [len(set(row[recorded[stage]].fillna(MISSING))) > 1 for (stage, _), row in wide.iterrows()]
    return wide[differs].fillna(MISSING)


def _text(value: Any) -> str:
    return MISSING if value is None else str(value)


def run_lines(c: Comparison) -> list[str]:
    """Id, kind, where its figures came from (per stage when they differ)."""
    lines = []
    for run in c.runs:
        labels = c.overview[c.overview["run"] == run.id]["label"].str.extract(r"\((.*)\)$")[0].dropna().unique()
        where = "; ".join(labels) or "no record compared"
        lines.append(f"{run.id} ({run.kind} run, {', '.join(run.stages)}): {where}")
    return lines


def figure_png(part: Part) -> Optional[bytes]:
    fig = part.figure() if part.figure is not None else None
    return None if fig is None else png_bytes(fig)


def _table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p class='none'>nothing to compare</p>"
    # Recorded text is escaped (a parameter "<run>/train", a summary with "<"), the index too.
    # a cell "VERDICT: summary" is coloured by its verdict
    return frame.style.map(lambda v: verdict_colour(str(v).split(":", 1)[0].strip())).format(na_rep=MISSING, precision=1, escape="html") \
        .format_index(escape="html", axis=0).to_html()


def sections(c: Comparison) -> list[tuple[str, str]]:
    """(title, HTML) of each part with something to show, in reading order."""
    parts = [("Runs", "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in run_lines(c)) + "</ul>"),
             ("Verdict of every stage", _table_html(overview_table(c)))]
    for part in c.parts:  # a figure first: what to look at when two runs differ
        png = figure_png(part)
        if png is not None:
            parts.append((part.title, f"<img alt='{html.escape(part.title)}' src="
                                      f"'data:image/png;base64,{base64.b64encode(png).decode()}'>"))
    if not c.headlines.empty:
        parts.append(("Headline figures (differs: not the same in every run)", _table_html(headline_table(c))))
    if not c.parameters.empty:
        parts.append(("Parameters that differ", _table_html(parameter_table(c))))
    if not c.throughput.empty:
        parts.append(("Tokens/s side by side", _table_html(throughput_table(c))))
    parts += [(part.title, _table_html(part.frame)) for part in c.parts if part.figure is None]
    if c.notes:
        parts.append(("Notes", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in c.notes) + "</ul>"))
    return parts


def comparison_html(c: Comparison) -> str:
    """One offline page (no script, the figure inline): what ``hyport compare`` writes."""
    body = "".join(f"<h2>{html.escape(title)}</h2>{part}" for title, part in sections(c))
    title = html.escape("hyport compare: " + " vs ".join(r.id for r in c.runs))
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
    """In a notebook: the same parts as the page (the stages' figures after the verdicts)."""
    from IPython.display import HTML, display

    display(HTML("".join(f"<h4>{html.escape(title)}</h4><div style='overflow-x:auto'>{part}</div>"
                         for title, part in sections(c))))


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
        options = [(f"{r.id} ({r.kind}: {', '.join(r.stages)})", r.id) for r in runs]
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
