"""``report.html``: the index and every stage page in one file to send; :func:`zip_run`
packs the whole run folder (``hyport report --zip``).

Each stage page is inlined whole, not framed: printed or captured full-page, every
stage shows all its results. The pages share nbconvert's JupyterLab styles, which come
once, in the head; each page's ids (and the links to them) get the stage as a prefix, so
that two notebooks' "Parameters" headings stay two anchors. Code cells are collapsed
(the pages' own template), wide tables scroll on screen and wrap in print, and each
stage starts a printed page. No script: it opens, and prints, offline.
"""

from __future__ import annotations

import html
import re
import zipfile
from pathlib import Path
from typing import Optional

from hyport_lib.report.breaks import breakable_cells
from hyport_lib.report.index import render_index, write_index
from hyport_lib.report.paths import relative_text
from hyport_lib.report.run import ReportRun, StageView, load_views
from hyport_lib.utils.files import atomic_target, atomic_write_text

BUNDLE = "report.html"
_PAGE_LINK = re.compile(r'href="html/([^"]+)\.html"')
_FILE_LINK = re.compile(r'<a href="((?:notebooks|logs)/[^"]+)">([^<]*)</a>')
_BODY = re.compile(r"<body[^>]*>")
_STYLE = re.compile(r"<style[^>]*>.*?</style>", re.S)
_MAIN = re.compile(r"<main>(.*)</main>", re.S)
_BODY_CONTENT = re.compile(r"<body[^>]*>(.*)</body>", re.S)
_IN_PAGE_LINK = re.compile(r'href="#([^"]+)"')
_ID = re.compile(r'(?<![\w-])id="([^"]+)"')

#: The bundle's own rules: the stage pages, inlined, on screen and in print.
BUNDLE_CSS = """
.hy-stage{margin-top:2.5em;border-top:3px solid #ccc;padding-top:.5em}
.hy-stage .jp-Notebook{padding:0;overflow:visible;background:transparent}
.hy-stage h2.hy-stage-title{margin:.2em 0 .6em 0}
@media print{
  body{max-width:none;margin:0;padding:0}
  /* a cell wraps at its spaces and at the <wbr> put after _ / and a dotted name's dots,
     never inside a number or a word (a styled table's own break-word rule included) */
  td,th,td *,th *,.hy-stage td,.hy-stage th,.hy-stage td *,.hy-stage th *{overflow-wrap:normal !important;
    word-break:normal !important}
  .hy-stage{break-before:page;border-top:none;margin-top:0}
  .hy-top,.hy-note{display:none}
}
"""


def stage_page_parts(text: str, prefix: str) -> tuple[list[str], str]:
    """A stage page's ``<style>`` blocks and its body. The ids its own links point at (its
    headings) and those links get ``prefix``; other ids (a styled table's, which its scoped
    CSS names) stay."""
    head, _, _ = text.partition("<body")
    body = _MAIN.search(text) or _BODY_CONTENT.search(text)
    content = body.group(1) if body else ""
    targets = set(_IN_PAGE_LINK.findall(content))
    content = _IN_PAGE_LINK.sub(lambda m: f'href="#{prefix}{m.group(1)}"', content)
    content = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"' if m.group(1) in targets else m.group(0),
                      content)
    return _STYLE.findall(head), content


def render_bundle(run: ReportRun, views: Optional[list[StageView]] = None) -> str:
    # the index's cells break as the stage pages' do (index.html itself stays plain text to read)
    index = breakable_cells(render_index(run, views))
    index = _PAGE_LINK.sub(lambda m: f'href="#page-{m.group(1)}"', index)
    index = _FILE_LINK.sub(lambda m: f'<span title="in the run folder: {m.group(1)}">{m.group(2)}</span>',
                           index)
    styles: dict[str, None] = {}  # the pages' styles, each once, in order
    sections = []
    for stage in run.stages:
        page = Path(run.run_dir) / stage.html if stage.html else None
        if page is None or not page.is_file():
            continue
        name = html.escape(stage.stage)
        # a page written before its paths were made relative to the run gets them here
        text = relative_text(page.read_text(encoding="utf-8"), run.run_dir, "html")
        page_styles, content = stage_page_parts(text, f"{stage.stage}--")
        styles.update(dict.fromkeys(page_styles))
        sections.append(
            f'<section class="hy-stage" id="page-{name}"><h2 class="hy-stage-title">{name} — '
            f'{html.escape(stage.verdict)} <a href="#top" class="prov hy-top">(top)</a></h2>'
            f'<div class="jp-Notebook" data-jp-theme-light="true" data-jp-theme-name="JupyterLab Light">'
            f'{content}</div></section>')
    note = ('<p class="prov hy-note">One file: the index above and every stage page below, '
            'code cells collapsed (click "code" to open one). Notebooks and logs stay in the '
            'run folder.</p>')
    # the pages' styles first: the index's own rules, and the bundle's, win where both apply
    index = index.replace("<style>", "".join(styles) + "<style>", 1)
    index = index.replace("</head>", f"<style>{BUNDLE_CSS}</style></head>", 1)
    index = _BODY.sub(lambda m: m.group(0) + '<a id="top"></a>', index, count=1)
    return index.replace("</body>", note + "".join(sections) + "</body>", 1)


def write_bundle(run: ReportRun, views: Optional[list[StageView]] = None) -> Path:
    return atomic_write_text(Path(run.run_dir) / BUNDLE, render_bundle(run, views))


def write_run_pages(run: ReportRun) -> Path:
    """The run's ``index.html`` and ``report.html`` written again from its records (after a
    ``compare.html`` lands in its folder: both link it now); the index."""
    views = load_views(run)
    index = write_index(run, views)
    write_bundle(run, views)
    return index


#: Files of a run folder that are not part of the run: its lock, notebooks of a stage
#: still being written, atomic writes in progress.
_NOT_PACKED = re.compile(r"(^|/)(\.runner\.lock|\.partial(/.*)?|\..*\.tmp)$")
#: Already compressed, or large binary weights where deflate buys little and costs minutes.
_STORED = (".safetensors", ".pt", ".bin", ".png", ".jpg", ".zip", ".gz")


def zip_run(run_dir: Path) -> Path:
    """``<run-id>.zip`` beside the run folder, written atomically."""
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
