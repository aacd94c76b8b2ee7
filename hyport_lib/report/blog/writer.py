"""Blog-post drafts of a run: ``blog.en.md`` (also as ``blog.md``) and ``blog.zh.md``.

Shaped as the seed's write-up of a bring-up: the porting problem, one section per stage,
the sections stages add after theirs, caveats, the commands that reproduce the run. One
frame template (``report/templates/blog/blog.md.j2``) takes each stage's template, both
in every language (:mod:`hyport_lib.drafting`). Every number is copied from the run's
recorded files with its provenance; a partial run never makes the drafts raise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hyport_lib.drafting.templates import FRAME_TEMPLATE, LANGS, environment, tidy
from hyport_lib.report.blog.context import build_context
from hyport_lib.report.blog.figures import draw_figures
from hyport_lib.report.paths import relative_text
from hyport_lib.report.run import ReportRun, StageView, load_views
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_text

#: File name -> language. ``blog.md`` is the English draft under its historical name.
DRAFTS = {"blog.md": "en", "blog.en.md": "en", "blog.zh.md": "zh"}


def render_blog(run: ReportRun, lang: str = "en", *, figures: Optional[dict] = None,
                notes: Optional[list] = None, views: Optional[list[StageView]] = None) -> str:
    """The draft in ``lang`` as Markdown, scrubbed of secret values, its paths relative to
    the run (:func:`~hyport_lib.report.paths.relative_text`) (ValueError for a
    language there is no text for). ``figures`` and ``notes`` are what
    :func:`~hyport_lib.report.blog.figures.draw_figures` drew and met; ``views`` as
    :func:`~hyport_lib.report.run.load_views` reads them (read here when not given)."""
    template = environment(lang).get_template(FRAME_TEMPLATE)
    views = load_views(run) if views is None else views
    text = template.render(build_context(run, views, figures or {}, notes or []))
    return relative_text(scrub_text(tidy(text)), Path(run.run_dir), "markdown")


def write_blog_drafts(run: ReportRun, views: Optional[list[StageView]] = None) -> list[Path]:
    """Write ``blog.md``, ``blog.en.md`` and ``blog.zh.md`` (and the figures) atomically;
    the drafts written, in the order of :data:`DRAFTS`."""
    views = load_views(run) if views is None else views
    figures, problems = draw_figures(Path(run.run_dir), views)
    texts = {lang: render_blog(run, lang, figures=figures, notes=problems, views=views)
             for lang in LANGS}
    return [atomic_write_text(Path(run.run_dir) / name, texts[lang]) for name, lang in DRAFTS.items()]
