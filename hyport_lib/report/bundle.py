"""``report.html``: the index and every stage page in one file to send; :func:`zip_run`
packs the whole run folder (``hyport report --zip``).

Each stage page is embedded whole in an ``<iframe srcdoc=...>`` (its styles stay its own;
images are already data URIs). Its own anchors point at ``about:srcdoc#...``: in a srcdoc
frame a bare ``#x`` resolves against report.html and would load the whole report into it.
"""

from __future__ import annotations

import html
import re
import zipfile
from pathlib import Path
from typing import Optional

from hyport_lib.report.index import render_index
from hyport_lib.report.records import StageView
from hyport_lib.report.run import ReportRun
from hyport_lib.utils.files import atomic_target, atomic_write_text

BUNDLE = "report.html"
_PAGE_LINK = re.compile(r'href="html/([^"]+)\.html"')
_FILE_LINK = re.compile(r'<a href="((?:notebooks|logs)/[^"]+)">([^<]*)</a>')
_OWN_ANCHOR = re.compile(r'href="#')
_BODY = re.compile(r"<body[^>]*>")


def render_bundle(run: ReportRun, views: Optional[list[StageView]] = None) -> str:
    """The index, then one section per stage page that exists; ``views`` as for
    :func:`~hyport_lib.report.index.render_index`."""
    index = render_index(run, views)
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
        doc = _OWN_ANCHOR.sub('href="about:srcdoc#', page.read_text(encoding="utf-8"))
        sections.append(
            f'<section id="page-{html.escape(stage.stage)}"><h2>{html.escape(stage.stage)} — '
            f'{html.escape(stage.verdict)} <a href="#top" class="prov">(top)</a></h2>'
            f'<iframe title="{html.escape(stage.stage)}" srcdoc="{html.escape(doc, quote=True)}" '
            'style="width:100%;height:85vh;border:1px solid #ccc"></iframe></section>')
    note = ('<p class="prov">One file: the index above and every stage page below (each in its '
            'own frame). Notebooks and logs stay in the run folder.</p>')
    index = _BODY.sub(lambda m: m.group(0) + '<a id="top"></a>', index, count=1)
    return index.replace("</body>", note + "".join(sections) + "</body>", 1)


def write_bundle(run: ReportRun, views: Optional[list[StageView]] = None) -> Path:
    return atomic_write_text(Path(run.run_dir) / BUNDLE, render_bundle(run, views))


#: Files of a run folder that are not part of the run: its lock, notebooks of a stage
#: still being written, atomic writes in progress.
_NOT_PACKED = re.compile(r"(^|/)(\.runner\.lock|\.partial(/.*)?|\..*\.tmp)$")
#: Already compressed, or large binary weights where deflate buys little and costs minutes.
_STORED = (".safetensors", ".pt", ".bin", ".png", ".jpg", ".zip", ".gz")


def zip_run(run_dir: Path) -> Path:
    """``<run-id>.zip`` beside the run folder: every file under ``<run-id>/`` except the
    run's own lock, partial notebooks and temporary files; weights stored, not deflated.
    Written to a temporary name, then renamed: a reader never sees half an archive."""
    run_dir = Path(run_dir)
    target = run_dir.parent / f"{run_dir.name}.zip"
    with atomic_target(target, mode=0o644) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as archive:
        for path in sorted(run_dir.rglob("*")):
            relative = path.relative_to(run_dir).as_posix()
            if not path.is_file() or path.is_symlink() or _NOT_PACKED.search(relative):
                continue
            method = zipfile.ZIP_STORED if path.name.endswith(_STORED) else zipfile.ZIP_DEFLATED
            archive.write(path, f"{run_dir.name}/{relative}", compress_type=method)
    return target
