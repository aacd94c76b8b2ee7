"""The files that tell a run's state, rewritten whenever it changes (by the runner, and by
:mod:`~hyport_lib.report.cleanup` for a run it found killed)."""

from __future__ import annotations

from hyport_lib.report.blog.writer import write_blog_drafts
from hyport_lib.report.bundle import write_bundle
from hyport_lib.report.index import write_index
from hyport_lib.report.run import ReportRun, load_views
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj


def write_run_files(run: ReportRun, blog: bool = True) -> None:
    """``index.html`` and ``run.json`` from the run's state now; with ``blog``, also the
    drafts, their figures and ``report.html`` (unchanged when a stage starts). Every
    recorded result is read once and shared by every file."""
    views = load_views(run)
    write_index(run, views)
    atomic_write_json(run.run_dir / "run.json", scrub_obj(run.to_dict()))
    if blog:
        write_blog_drafts(run, views)
        write_bundle(run, views)
