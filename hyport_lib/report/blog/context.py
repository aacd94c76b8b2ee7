"""What the drafts' templates are written from: the run, and one :class:`StagePart` per
stage of the run's notebooks folder (:func:`build_context`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from hyport_lib.drafting.templates import has_template, stage_template
from hyport_lib.report.blog.frame import profile_name, reproduce_command
from hyport_lib.report.run import NOT_RUN, PENDING, RUNNING, ReportRun, StageView
from hyport_lib.results import INTERRUPTED
from hyport_lib.stages import stage_hook

#: Statuses of a stage that has recorded nothing yet (nor will, in this run).
NO_DATA_YET = (PENDING, RUNNING, NOT_RUN)


def stage_record(view: Optional[StageView]) -> Any:
    """The recorded result a stage's template is fed (None when there is none to show):
    the one place the templates get it from."""
    return view.result if view is not None and view.has_data else None


@dataclass
class StagePart:
    """One stage as the drafts' templates see it."""

    stage: str  # NN_name
    template: Optional[str]  # its own template; None: its headline is shown as a table
    view: Optional[StageView]  # None for a stage the run left out (``--only``)
    record: Any  # what its section is drawn from (:func:`stage_record`)

    @property
    def number(self) -> str:
        return self.stage.partition("_")[0]

    @property
    def name(self) -> str:
        """The stage's name with spaces: its title where it has no template."""
        return self.stage.partition("_")[2].replace("_", " ")


def stage_part(stage: str, view: Optional[StageView]) -> StagePart:
    template = stage_template(stage.partition("_")[2])
    return StagePart(stage, template if has_template(template) else None, view, stage_record(view))


def stage_facts(views: list[StageView]) -> tuple[dict, list[str]]:
    """Run-wide facts from each stage's ``blog_facts`` (the first stage's non-empty value
    kept), and why a stage gave none (an odd record: its own section says more)."""
    facts: dict = {}
    problems: list[str] = []
    for view in views:
        give = view.hook("blog_facts")
        if view.record is None or give is None:
            continue
        try:
            found = give(view.record)
        except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the drafts
            problems.append(f"{view.stage}: {type(exc).__name__}: {exc}")
            continue
        for key, value in found.items():
            if value and key not in facts:
                facts[key] = value
    return facts, problems


def recorded_notes(run: ReportRun, views: list[StageView]) -> list[str]:
    """Notes the run and its stages recorded that qualify the figures (``blog_notes``)."""
    notes = [str(n) for n in run.notes]
    for view in views:
        give = view.hook("blog_notes")
        if view.record is not None and give is not None:
            notes += give(view.record)
    return notes


def build_context(run: ReportRun, views: list[StageView], figures: dict, notes: list) -> dict:
    """The variables of the drafts' templates (the same in every language)."""
    facts, unread = stage_facts(views)
    parts = [stage_part(view.stage, view) for view in views]
    left_out = [stage_part(str(stage), None) for stage in run.left_out]
    # The sections stages add after theirs, in the stages' order, a stage left out told so.
    appendices = sorted((p for p in parts + left_out if p.template), key=lambda p: p.stage)
    return {"run": run, "parameters": run.parameters, "facts": facts, "host": run.host,
            "versions": run.versions, "figures": dict(figures), "profile": profile_name(run.profile) if run.profile else None, "stages": parts, "left_out": left_out,
            "appendices": appendices, "figure_problems": list(notes), "unread_facts": unread,
            "recorded_notes": lambda: recorded_notes(run, views), "no_data_yet": NO_DATA_YET,
            "interrupted": INTERRUPTED, "reproduce": lambda: reproduce_command(run, run.parameters, views),
            "values": _values}


def _values(part: StagePart) -> dict:
    """What the stage's ``blog_values`` derives from its record for its template ({} without)."""
    derive = stage_hook(part.stage, "blog_values")
    return derive(part.view.record) if derive is not None and part.record is not None else {}
