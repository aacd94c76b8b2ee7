"""``report.html``: the whole run in one file to send — the index and every stage page.

Each stage page is embedded whole in an ``<iframe srcdoc=...>`` (its own styles stay its
own), so the file needs nothing beside it: images are already data URIs, no script or
font is fetched. The index's links to the stage pages become links inside the file;
links to files that stay in the run folder (notebooks, logs) are shown as their paths.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from hyport_lib.report.index import render_index
from hyport_lib.report.run import ReportRun
from hyport_lib.utils.files import atomic_write_text

BUNDLE = "report.html"
_PAGE_LINK = re.compile(r'href="html/([^"]+)\.html"')
_FILE_LINK = re.compile(r'<a href="((?:notebooks|logs)/[^"]+)">([^<]*)</a>')


def render_bundle(run: ReportRun) -> str:
    """The index, then one section per stage page that exists."""
    index = render_index(run)
    index = _PAGE_LINK.sub(lambda m: f'href="#page-{m.group(1)}"', index)
    index = _FILE_LINK.sub(lambda m: f'<span title="in the run folder: {m.group(1)}">{m.group(2)}</span>',
                           index)
    sections = []
    for stage in run.stages:
        if not stage.html:
            continue
        page = Path(run.run_dir) / stage.html
        if not page.is_file():
            continue
        sections.append(
            f'<section id="page-{html.escape(stage.stage)}"><h2>{html.escape(stage.stage)} — '
            f'{html.escape(stage.verdict)} <a href="#top" class="prov">(top)</a></h2>'
            f'<iframe title="{html.escape(stage.stage)}" srcdoc="{html.escape(page.read_text(encoding="utf-8"), quote=True)}" '
            'style="width:100%;height:85vh;border:1px solid #ccc"></iframe></section>')
    note = ('<p class="prov">One file: the index above and every stage page below (each in its '
            'own frame). Notebooks and logs stay in the run folder.</p>')
    body = f'<a id="top"></a>{note}' + "".join(sections)
    return index.replace("</body>", body + "</body>", 1)


def write_bundle(run: ReportRun) -> Path:
    return atomic_write_text(Path(run.run_dir) / BUNDLE, render_bundle(run))
