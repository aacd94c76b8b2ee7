"""``index.html`` of a run: summary first, details one click away.

It is plain text assembled here: no script, no external style or font, so the
index opens offline. Every figure keeps its provenance label (CPU / emulated / NPU). Each
stage's card shows its recorded figures (``show.glance``, else its headline) and inline
SVG (``show.glance_svg``), never recomputed; an odd record says so on its card.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from typing import Optional

from hyport_lib.display import MISSING, VERDICT_COLOURS
from hyport_lib.drafting.values import fmt_value
from hyport_lib.report.blog import stage_facts
from hyport_lib.report.nodes import read_node_runs, run_shape
from hyport_lib.report.paths import relative_text, shown_path, shown_profile
from hyport_lib.report.run import NOT_RUN, PENDING, RUNNING, ReportRun, StageView, load_views
from hyport_lib.results import INTERRUPTED, VERDICTS, StageRecord
from hyport_lib.stages import none_text
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_text
from hyport_lib.workbook.compare_show import COMPARE_PAGE

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em}
h1{margin-bottom:.2em} .sub{color:#666;margin-top:0}
table.hy{border-collapse:collapse;margin:1em 0;width:100%} table.hy th,table.hy td{border:1px solid #ccc;
padding:.35em .6em;text-align:left;vertical-align:top;font-size:.92em;overflow-wrap:break-word}
table.hy th{background:#f3f3f3} table.hy code{word-break:break-all}
.verdict{font-weight:bold;text-align:center} .err{color:#b00020;font-family:monospace;white-space:pre-wrap}
.prov{color:#555;font-size:.85em} code{background:#f5f5f5;padding:0 .2em}
.summary span{display:inline-block;margin-right:1em;padding:.2em .6em;border-radius:4px}
.glance{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}
.card{border:1px solid #ccc;border-radius:6px;padding:.6em .8em;width:300px;font-size:.9em}
.card h3{margin:.1em 0 .4em 0;font-size:1em} .card dl{margin:0;display:grid;
grid-template-columns:auto 1fr;gap:.1em .6em} .card dt{color:#555} .card dd{margin:0}
.card .prov{margin-top:.4em} .verdict-tag{padding:0 .4em;border-radius:3px;font-weight:bold}
#parameters tr.given td{font-weight:bold} .hy-nb{white-space:nowrap}
@media print{table.hy th,table.hy td{font-size:8pt;overflow-wrap:normal;word-break:normal;padding:.2em .35em}
table.hy code{word-break:normal}}
"""


def _esc(value) -> str:
    return html.escape(scrub_text(str(value)))


def _verdict_cell(verdict: str) -> str:
    colour = VERDICT_COLOURS.get(verdict.upper(), "#ffffff")
    return f'<td class="verdict" style="background:{colour}">{_esc(verdict)}</td>'


def _headline(headline: dict) -> str:
    if not headline:
        return ""
    return "<br>".join(f"{_esc(k)}: <b>{_esc(fmt_value(v))}</b>" for k, v in headline.items())


def _link(path, label) -> str:
    return f'<a href="{html.escape(path)}">{html.escape(label)}</a>' if path else ""


# --------------------------------------------------------------------------- the cards
def headline_figures(record: StageRecord) -> list[tuple[str, str]]:
    """The card of a stage without a ``glance`` of its own."""
    return [(k, fmt_value(v)) for k, v in record.headline.items()]


def card_figures(view: StageView) -> list[tuple[str, str]]:
    if view.record is None:
        return []
    # a record with no data (a stage a node > 0 leaves to node 0) has nothing for the stage's own card
    glance = (view.hook("glance") if view.has_data else None) or headline_figures
    try:
        return glance(view.record)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:  # an odd record: say so
        return [("(figures unreadable)", f"{type(exc).__name__}: {exc}")]


def card_svg(view: StageView) -> str:
    draw = view.hook("glance_svg")
    if view.record is None or draw is None:
        return ""
    try:
        return draw(view.record)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
        return f'<p class="prov">(figure unreadable: {html.escape(type(exc).__name__)})</p>'


def sources(views: list[StageView]) -> dict[str, list[str]]:
    """Provenance label -> the numbers of the stages whose recorded figures came from there."""
    by_label: dict[str, list[str]] = {}
    for view in views:
        if view.record is not None and view.record.provenance is not None:
            by_label.setdefault(view.record.provenance.label, []).append(view.number)
    return by_label


#: What a card without figures says, by the stage's state.
_NO_FIGURES = {NOT_RUN: "did not run: the run stopped before this stage",
               PENDING: "not started yet", RUNNING: "running now"}


def _glance(views: list[StageView]) -> str:
    cards = []
    for view in views:
        s = view.outcome
        rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in card_figures(view))
        colour = VERDICT_COLOURS.get(s.verdict.upper(), "#ffffff")
        body = f"<dl>{rows}</dl>" if rows else f"<p>{_esc(s.error or _NO_FIGURES.get(s.verdict, s.summary or 'no figures recorded'))}</p>"
        spark = card_svg(view)
        prov = s.provenance.label if s.provenance else ""
        cards.append(
            f'<div class="card" id="glance-{_esc(s.stage)}"><h3>{_link(s.html, s.stage) or _esc(s.stage)} '
            f'<span class="verdict-tag" style="background:{colour}">{_esc(s.verdict)}</span></h3>'
            f'{body}{spark}<div class="prov">{_esc(prov)}</div></div>')
    found = sources(views)
    legend = "; ".join(f"{_esc(label)}: stages {', '.join(stages)}" for label, stages in found.items())
    legend = f"<p class=\"prov\">Where the figures come from — {legend}.</p>" if legend else ""
    return f'<h2>At a glance</h2><div class="glance">{"".join(cards)}</div>{legend}'


def _parameter_rows(run: ReportRun) -> str:
    """One row per parameter and value, with the stages that run with it."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for stage in run.stages:
        for name, value in stage.parameters.items():
            shown = json.dumps(shown_path(value, run.root_dir), default=str, ensure_ascii=False)
            grouped.setdefault((name, shown), []).append(stage.stage)
    if not grouped:  # a run.json from before the effective values were recorded
        grouped = {(k, json.dumps(shown_path(v, run.root_dir), default=str, ensure_ascii=False)): []
                   for k, v in run.parameters.items()}
    rows = []
    for (name, shown), stages in sorted(grouped.items(), key=lambda item: (item[1][:1], item[0])):
        shown = none_text(stages[0] if stages else None, name) if shown == "null" else shown
        source = run.parameter_sources.get(name, "default")
        cls = ' class="given"' if source != "default" else ""
        rows.append(f"<tr{cls}><td><code>{_esc(name)}</code></td><td><code>{_esc(shown)}</code></td>"
                    f"<td>{_esc(source)}</td><td>{_esc(', '.join(stages))}</td></tr>")
    return "".join(rows)


def _nodes(run: ReportRun, views: list[StageView]) -> str:
    """Several hosts: node 0's index lists each node's part (its host, status, verdicts and
    folder) under the run's hosts × cards; another node's says whose part it holds."""
    if run.nnodes <= 1:
        return ""
    shape = run_shape(stage_facts(views)[0], run.nnodes).line()
    if run.node_rank > 0:
        return (f'<p id="nodes">Node {run.node_rank} of {run.nnodes} ({_esc(shape)}): this folder, '
                f'<code>&lt;run&gt;/nodes/node{run.node_rank}</code>, holds this host\'s part of the run; '
                f'the run\'s index, drafts and report are node 0\'s: {_link("../../index.html", "index.html")}.</p>')
    rows = []
    for node in read_node_runs(run.root_dir, run.nnodes, own=run.to_dict()):
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(node.verdicts.items()))
        link = _link(node.index, "index") if node.found else _esc(node.problem)
        rows.append(f"<tr><td>{node.rank}</td><td><code>{_esc(node.host or '?')}</code></td>"
                    f"<td>{_esc(node.status or '-')}</td><td>{_esc(verdicts or '-')}</td>"
                    f"<td><code>{_esc(node.shown_folder)}</code> {link}</td></tr>")
    return (f'<h2>Nodes: {_esc(shape)}</h2><p class="prov">Each node ran its part of the run on its host; node 0 '
            f'wrote this folder\'s results, drafts and report, each other node its own folder (as read when '
            f'this page was written).</p><table class="hy" id="nodes"><thead><tr><th>node</th><th>host</th>'
            f'<th>status</th><th>verdicts</th><th>its results</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _compare_link(run: ReportRun) -> str:
    """A link to the run's ``compare.html`` when ``hyport report --compare`` wrote one."""
    if not (run.root_dir / COMPARE_PAGE).is_file():
        return ""
    return (f'<p class="compare">This run beside another: <a href="{COMPARE_PAGE}">{COMPARE_PAGE}</a> '
            f'(verdicts, parameters, figures and losses side by side)</p>')


def render_index(run: ReportRun, views: Optional[list[StageView]] = None) -> str:
    views = load_views(run) if views is None else views
    counts = Counter(s.verdict for s in run.stages)
    shown = [*VERDICTS, *(v for v in (RUNNING, INTERRUPTED, PENDING, NOT_RUN) if counts.get(v))]
    summary = "".join(
        f'<span style="background:{VERDICT_COLOURS[v]}">{v}: {counts.get(v, 0)}</span>'
        for v in shown)
    status = {"running": "<b>running</b> (this page is rewritten as stages start and end)",
              "finished": "finished", "interrupted": "<b>interrupted</b> by a stop signal",
              "killed": "<b>killed</b>: the runner died without finishing"}.get(run.status, run.status)
    left_out = ([f"Not part of this run (left out with --only): {', '.join(run.left_out)}"]
                if run.left_out else [])
    notes = "".join(f"<li>{_esc(n)}</li>" for n in left_out + list(run.notes))
    notes = f"<ul>{notes}</ul>" if notes else ""
    rows = []
    for s in run.stages:
        prov = s.provenance.label if s.provenance else ""
        error = f'<div class="err">{_esc(s.error)}</div>' if s.error else ""
        rows.append(
            "<tr>"
            f"<td>{_esc(s.stage)}</td>{_verdict_cell(s.verdict)}"
            f"<td>{_esc(s.summary)}{error}</td>"
            f"<td>{s.duration_s:.1f} s</td>"
            f"<td>{_headline(s.headline)}</td>"
            f'<td class="prov">{_esc(prov)}</td>'
            f"<td>{_link(s.html, 'report')} {_link(s.notebook, 'notebook')} {_link(s.log, 'log')}</td>"
            "</tr>")
    trust = run.parameters.get("trust_remote_code", False)
    trust_line = ("<b>trust_remote_code is ON</b> (remote model code was allowed to run)"
                  if trust else "trust_remote_code: off")
    params = _parameter_rows(run)
    unused = (f"<p>Parameters no stage declares (ignored, accepted with "
              f"--allow-unknown-parameters): {_esc(', '.join(run.unused_parameters))}</p>"
              if run.unused_parameters else "")
    versions = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v if v is not None else 'not installed')}</td></tr>"
                       for k, v in run.versions.items())
    return relative_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hyport report {_esc(run.run_id)}</title>
<style>{_CSS}</style></head>
<body>
<h1>hyport report</h1>
<p class="sub">run <code>{_esc(run.run_id)}</code> · started {_esc(run.started)} · ended {_esc(run.finished or '-')}
 · status {status} · profile {_esc(shown_profile(run.profile, run.root_dir) or '(none: notebook defaults)')}</p>
<p class="summary">{summary}</p>{_compare_link(run)}{notes}
{_nodes(run, views)}
<p>{trust_line}. Figures measured on CPU or computed by hyport's NPU emulation are labelled
as such in the <i>source</i> column and are not NPU measurements.</p>
{_glance(views)}
<h2>Stages</h2>
<table class="hy" id="stages"><thead><tr><th>stage</th><th>verdict</th><th>summary</th><th>duration</th>
<th>headline figures</th><th>source</th><th>details</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<h2>Parameters</h2>{unused}
<p class="prov">What each stage ran with: every parameter it declares, given by the profile or
<code>-p</code> (in bold) or its own default; paths under the run folder start with <code>&lt;run&gt;</code>,
under the repository with <code>&lt;repo&gt;</code>, under hyport's cache with <code>&lt;cache&gt;</code>,
the Python environment <code>&lt;venv&gt;</code>, the temporary folder <code>&lt;tmp&gt;</code>, the home
folder <code>~</code>; {MISSING}: none given, and what the stage then does.</p>
<table class="hy" id="parameters"><thead><tr><th>parameter</th><th>value</th><th>from</th><th>stages</th></tr></thead>
<tbody>{params or '<tr><td colspan="4">(none)</td></tr>'}</tbody></table>
<h2>Versions</h2>
<table class="hy" id="versions"><tbody>{versions}</tbody></table>
</body></html>
""", run.root_dir, "html")


def write_index(run: ReportRun, views: Optional[list[StageView]] = None):
    return atomic_write_text(run.run_dir / "index.html", render_index(run, views))
