"""The stages' parts of a blog draft: one section per planned stage, then the sections
stages add after theirs (``blog_appendix``, such as the dataset notes).

A stage's section always opens the same way: its heading with the verdict, where its
figures came from, and what its status means in plain words; a failed or interrupted
stage shows its recorded error as a quotation. Then, when the stage finished and
recorded data, the stage's own ``blog_section`` draws its tables (see
:mod:`hyport_lib.drafting`); otherwise, or for a stage without one, its recorded
headline is shown. A stage's function that meets data it cannot read makes the section
say so; it never stops the draft.
"""

from __future__ import annotations

from hyport_lib.drafting.markdown import code, quote, recorded, table
from hyport_lib.report.blog.context import BlogContext
from hyport_lib.report.records import StageView, stage_hook
from hyport_lib.report.run import INTERRUPTED, NOT_RUN, PENDING, RUNNING

#: Statuses of a stage that has recorded nothing yet (nor will, in this run).
NO_DATA_YET = (PENDING, RUNNING, NOT_RUN)


def stage_name(stage_id: str, lang: str) -> str:
    """``NN Title`` for the stage ``NN_name``: its number and its ``blog_title`` (its name
    with spaces for a stage without one)."""
    number, _, name = stage_id.partition("_")
    title = stage_hook(stage_id, "blog_title")
    return f"{number} {title(lang) if title else name.replace('_', ' ')}"


def section_error(ctx: BlogContext, exc: Exception) -> list[str]:
    """What a part of the draft says in place of what it could not draft."""
    return [ctx.t["section_error"], ""] + quote(f"{type(exc).__name__}: {exc}")


def stage_section(view: StageView, ctx: BlogContext) -> list[str]:
    """See the module docstring."""
    t, verdict = ctx.t, view.verdict
    lines = [f"## {stage_name(view.stage, ctx.lang)} — {t['verdict_names'].get(verdict, verdict)}", ""]
    if view.provenance and verdict not in NO_DATA_YET:
        label = view.provenance.get("label")
        shown = f" ({code(label)})" if label and ctx.lang == "en" else (f"（{code(label)}）" if label else "")
        lines += [f"*{t['source']}{t['colon']}{ctx.draft.prov(view.provenance)}{shown}*", ""]
    # A stage that ran to its end and judged its own result a FAIL has no error to quote:
    # its summary says why.
    judged = verdict == "FAIL" and not view.outcome.error and view.result is not None
    says = t["fail_judged"] if judged else (
        t["verdict_says"].get(verdict) or t["unknown_status"].format(verdict=code(verdict)))
    lines += [says, ""]
    if (verdict in ("FAIL", INTERRUPTED) and not judged) or (view.outcome.error and verdict not in NO_DATA_YET):
        lines += quote(view.outcome.error) or [t["no_error"], ""]
    if view.problem:
        lines += [t["bad_result"], ""] + quote(view.problem)
    if verdict in NO_DATA_YET:
        return lines
    # Only a summary the stage recorded itself: the runner's placeholder for a stage that
    # died early ("stage failed") would read as the stage's own words.
    recorded_summary = (view.result or {}).get("summary")
    if recorded_summary:
        lines += [t["summary_is"], ""] + quote(str(recorded_summary))
    section = view.hook("blog_section")
    if view.has_data and section is not None:
        if verdict == "FAIL":
            lines += [t["judged_data"] if judged else t["partial_data"], ""]
        try:
            lines += section(view.result, ctx.draft)
        except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the draft
            lines += section_error(ctx, exc)
        return lines
    if view.finished:
        figures = headline_table(view.headline, ctx)
        if view.result is None:
            lines += [t["no_result"] if figures else t["no_figures"], ""]
        lines += figures
    return lines


def headline_table(headline: dict, ctx: BlogContext) -> list[str]:
    """A stage's recorded figures (name -> value) as a two-column table."""
    if not headline:
        return []
    return table([ctx.t["figure"], ctx.t["value"]],
                 [(recorded(k, ctx.lang), ctx.draft.value(v)) for k, v in headline.items()])


def appendices(ctx: BlogContext) -> list[str]:
    """The sections stages add after the stages' sections (``blog_appendix``), in the
    stages' order: every stage of the run's notebooks folder, a stage left out with
    ``--only`` told so (``in_run`` False)."""
    planned = {view.stage: view for view in ctx.views}
    lines: list[str] = []
    for stage_id in sorted({*planned, *ctx.run.left_out}):
        appendix = stage_hook(stage_id, "blog_appendix")
        if appendix is None:
            continue
        view = planned.get(stage_id)
        record = view.result if view is not None and view.has_data else None
        try:
            lines += appendix(record, ctx.draft, in_run=view is not None)
        except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the draft
            lines += [f"## {stage_name(stage_id, ctx.lang)}", ""] + section_error(ctx, exc)
    return lines


def recorded_notes(ctx: BlogContext) -> list[str]:
    """Notes the run and its stages recorded that qualify the figures (``blog_notes``)."""
    notes = [str(n) for n in (ctx.run.notes or [])]
    for view in ctx.views:
        give = view.hook("blog_notes")
        if view.result is not None and give is not None:
            notes += give(view.result)
    return notes
