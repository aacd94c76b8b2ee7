"""The files that tell a run's state, rewritten whenever it changes: ``index.html``,
``run.json`` and, unless asked not to, the blog drafts (with their figures) and
``report.html``.

The runner calls :func:`write_run_files` when the run starts, when each stage starts and
ends and when the run is stopped; :mod:`hyport_lib.report.cleanup` calls it for a run it
found killed. Every stage's recorded result is read once per call
(:func:`~hyport_lib.report.records.load_views`) and shared by every file.
"""

from __future__ import annotations

from hyport_lib.report.blog.writer import write_blog_drafts
from hyport_lib.report.bundle import write_bundle
from hyport_lib.report.index import write_index
from hyport_lib.report.records import load_views
from hyport_lib.report.run import ReportRun
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj


def write_run_files(run: ReportRun, blog: bool = True) -> None:
    """``index.html`` and ``run.json`` of a run, from its state now; with ``blog``, also
    the drafts, their figures and ``report.html`` (the runner leaves them out when a stage
    starts: nothing they show has changed)."""
    views = load_views(run)
    write_index(run, views)
    atomic_write_json(run.run_dir / "run.json", scrub_obj(run.to_dict()))
    if blog:
        write_blog_drafts(run, views)
        write_bundle(run, views)
