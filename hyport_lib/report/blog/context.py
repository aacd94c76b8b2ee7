"""What the drafts' frame and sections are written from: :class:`BlogContext`.

One context per language: the run, every planned stage's view, the frame's sentences,
the :class:`~hyport_lib.drafting.draft.Draft` handed to the stages' own sections (with
the run-wide facts the stages established, see :func:`stage_facts`) and the problems
met while drafting (a figure that could not be drawn, a stage's facts that could not be
read), which the caveats list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyport_lib.drafting.draft import Draft
from hyport_lib.report.blog.text import frame_phrases
from hyport_lib.report.records import StageView
from hyport_lib.report.run import ReportRun


@dataclass
class BlogContext:
    """What one draft is written from.

    Attributes:
        run: the run as it stands (any stage may be unfinished).
        views: every planned stage, in the run's order.
        t: the frame's sentences in ``draft.lang``, on top of the shared words.
        draft: what each stage's ``blog_section`` gets.
        notes: figures that could not be drawn, listed among the caveats.
        unread_facts: stages whose ``blog_facts`` failed on their record, and why (also
            listed among the caveats).
    """

    run: ReportRun
    views: list[StageView]
    t: dict
    draft: Draft
    notes: list = field(default_factory=list)
    unread_facts: list = field(default_factory=list)

    @property
    def lang(self) -> str:
        return self.draft.lang


def stage_facts(views: list[StageView]) -> tuple[dict, list[str]]:
    """Run-wide facts from each stage's ``blog_facts`` (the first stage's non-empty value
    kept), and why a stage gave none (an odd record: its own section says more)."""
    facts: dict = {}
    problems: list[str] = []
    for view in views:
        give = view.hook("blog_facts")
        if view.result is None or give is None:
            continue
        try:
            found = give(view.result)
        except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the drafts
            problems.append(f"{view.stage}: {type(exc).__name__}: {exc}")
            continue
        for key, value in found.items():
            if value and key not in facts:
                facts[key] = value
    return facts, problems


def build_context(run: ReportRun, lang: str, views: list[StageView], figures: dict,
                  notes: list) -> BlogContext:
    """The context of the draft in ``lang``.

    Raises:
        ValueError: for a language there is no text for.
    """
    t = frame_phrases(lang)
    facts, problems = stage_facts(views)
    parameters = run.parameters if isinstance(run.parameters, dict) else {}
    draft = Draft(lang=lang, figures=dict(figures), facts=facts, host=run.host or "",
                  parameters=parameters, versions=run.versions or {})
    return BlogContext(run=run, views=views, t=t, draft=draft, notes=list(notes), unread_facts=problems)
