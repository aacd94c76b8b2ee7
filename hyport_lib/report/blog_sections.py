"""The frame of a blog draft: title, background, one section per stage, dataset notes,
caveats and the commands that reproduce the run.

A stage's section always opens the same way: its heading with the verdict, where its
figures came from, and what its status means in plain words; a failed or interrupted
stage shows its recorded error as a quotation. Then, when the stage finished and
recorded data, its own renderer (:data:`RENDERERS`) draws the seed's tables; otherwise
the runner's index figures are shown. A renderer that meets data it cannot read makes
the section say so; it never stops the draft.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable

from hyport_lib.report.blog_data import Ctx, StageView, dig, find
from hyport_lib.report.blog_format import code, fenced, is_number, num, quote, recorded, table
from hyport_lib.report.blog_stages import attention_body, environment_body, inference_body
from hyport_lib.report.blog_stages_late import dataset_body, train_body, weights_body
from hyport_lib.report.run import INTERRUPTED, NOT_RUN, PENDING, RUNNING

#: Stage name (the id after ``NN_``) -> the renderer of its recorded data.
RENDERERS: dict[str, Callable[[StageView, Ctx], list[str]]] = {
    "environment": environment_body, "attention": attention_body, "inference": inference_body,
    "train": train_body, "weights": weights_body,
}
_NO_DATA_YET = (PENDING, RUNNING, NOT_RUN)


def title(ctx: Ctx) -> list[str]:
    """The heading: the model, the device and the number of cards, as the run recorded them."""
    params = ctx.run.parameters if isinstance(ctx.run.parameters, dict) else {}
    env = find(ctx.views, "environment")
    device = dig(env.data if env else {}, "device", default=params.get("device", "auto"))
    values = {"model": code(params.get("model_path", "tiny")), "device": code(device),
              "run_id": code(ctx.run.run_id)}
    cards = params.get("num_cards")
    if is_number(cards):
        return [f"# {ctx.t['title_cards'].format(cards=num(cards), **values)}", ""]
    return [f"# {ctx.t['title'].format(**values)}", ""]


def intro(ctx: Ctx) -> list[str]:
    status = ctx.t["status"].get(ctx.run.status, "")
    return [f"{ctx.t['intro'].format(run_id=code(ctx.run.run_id))}{ctx.t['space']}{status}".rstrip(), ""]


def background(ctx: Ctx) -> list[str]:
    """The porting problem, then which profile ran where (the host table is stage 01's)."""
    t, run = ctx.t, ctx.run
    profile = code(profile_name(run.profile)) if run.profile else t["defaults"]
    params = run.parameters if isinstance(run.parameters, dict) else {}
    lines = [f"## {t['background']}", "", t["problem"], "",
             t["run_context"].format(profile=profile, host=code(run.host or "?"),
                                     started=code(run.started or "?")), "",
             t["remote_on"] if params.get("trust_remote_code") else t["remote_off"], ""]
    if ctx.run.left_out:
        lines[4:4] = [t["left_out"].format(stages=_stage_list(ctx)), ""]
    return lines


def _stage_list(ctx: Ctx) -> str:
    """The stages ``--only`` left out, by name (``02 Attention swap``), as one phrase."""
    names = []
    for stage in ctx.run.left_out:
        number, _, name = str(stage).partition("_")
        names.append(f"{number} {ctx.t['stages'].get(name, name.replace('_', ' '))}")
    return ctx.t["list_sep"].join(names)


def stage_title(view: StageView, ctx: Ctx) -> str:
    name = ctx.t["stages"].get(view.name, view.name.replace("_", " "))
    return f"{view.number} {name}"


def stage_section(view: StageView, ctx: Ctx) -> list[str]:
    """See the module docstring."""
    t, verdict = ctx.t, view.verdict
    lines = [f"## {stage_title(view, ctx)} — {t['verdict_names'].get(verdict, verdict)}", ""]
    if view.provenance and verdict not in _NO_DATA_YET:
        label = view.provenance.get("label")
        shown = f" ({code(label)})" if label and ctx.lang == "en" else (f"（{code(label)}）" if label else "")
        lines += [f"*{t['source']}{t['colon']}{ctx.prov(view.provenance)}{shown}*", ""]
    # A stage that ran to its end and judged its own result a FAIL has no error to quote:
    # its summary says why.
    judged = verdict == "FAIL" and not view.outcome.error and view.result is not None
    says = t["fail_judged"] if judged else (
        t["verdict_says"].get(verdict) or t["unknown_status"].format(verdict=code(verdict)))
    lines += [says, ""]
    if (verdict in ("FAIL", INTERRUPTED) and not judged) or (view.outcome.error and verdict not in _NO_DATA_YET):
        lines += quote(view.outcome.error) or [t["no_error"], ""]
    if view.problem:
        lines += [t["bad_result"], ""] + quote(view.problem)
    if verdict in _NO_DATA_YET:
        return lines
    # Only a summary the stage recorded itself: the runner's placeholder for a stage that
    # died early ("stage failed") would read as the stage's own words.
    recorded_summary = (view.result or {}).get("summary")
    if recorded_summary:
        lines += [t["summary_is"], ""] + quote(str(recorded_summary))
    renderer = RENDERERS.get(view.name)
    if view.has_data and renderer is not None:
        if verdict == "FAIL":
            lines += [t["judged_data"] if judged else t["partial_data"], ""]
        try:
            lines += renderer(view, ctx)
        except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the draft
            lines += [t["section_error"], ""] + quote(f"{type(exc).__name__}: {exc}")
        return lines
    if view.finished:
        figures = headline_table(view.headline, ctx)
        if view.result is None:
            lines += [t["no_result"] if figures else t["no_figures"], ""]
        lines += figures
    return lines


def headline_table(headline: dict, ctx: Ctx) -> list[str]:
    """The runner's index figures of a stage (name -> value) as a two-column table."""
    if not headline:
        return []
    return table([ctx.t["figure"], ctx.t["value"]],
                 [(recorded(k, ctx.lang), ctx.value(v)) for k, v in headline.items()])


def dataset(ctx: Ctx) -> list[str]:
    """The seed's dataset notes, from what the training stage recorded."""
    lines = [f"## {ctx.t['dataset']}", ""]
    train = find(ctx.views, "train")
    if train is None:
        return lines + [ctx.t["ds_not_in_run"], ""]
    if not train.has_data:
        return lines + [ctx.t["ds_none"], ""]
    try:
        return lines + dataset_body(train, ctx)
    except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the draft
        return lines + [ctx.t["section_error"], ""] + quote(f"{type(exc).__name__}: {exc}")


def caveats(ctx: Ctx) -> list[str]:
    """Where each stage's figures came from, what failed or did not finish, recorded notes."""
    t = ctx.t
    lines = [f"## {t['caveats']}", "", f"- {t['not_npu']}"]
    for view in ctx.views:
        if view.provenance and view.verdict not in _NO_DATA_YET:
            lines.append(f"- {t['prov_line'].format(stage=stage_title(view, ctx), prov=ctx.prov(view.provenance))}")
    failed = [v.stage for v in ctx.views if v.verdict == "FAIL"]
    if failed:
        lines.append(f"- {t['failed'].format(stages=', '.join(failed))}")
    if ctx.run.left_out:
        lines.append(f"- {t['left_out_caveat'].format(stages=_stage_list(ctx))}")
    unfinished = [v.stage for v in ctx.views if not v.finished]
    if unfinished:
        lines.append(f"- {t['unfinished'].format(stages=', '.join(unfinished))}")
    if ctx.run.unused_parameters:
        names = ", ".join(code(n) for n in ctx.run.unused_parameters)
        lines.append(f"- {t['unused'].format(names=names)}")
    lines.append("")
    notes = recorded_notes(ctx)
    if notes:
        lines += [t["notes"], ""]
        for note in notes:
            lines += quote(note)
    if ctx.notes:
        lines += [t["figure_failed"], ""]
        for note in ctx.notes:
            lines += quote(note)
    return lines


def recorded_notes(ctx: Ctx) -> list[str]:
    """Notes the run and its stages recorded that qualify the figures."""
    notes = [str(n) for n in (ctx.run.notes or [])]
    attention, train = find(ctx.views, "attention"), find(ctx.views, "train")
    if attention is not None:
        notes += [str(n) for n in dig(attention.data, "notes", default=[]) if n]
    if train is not None:
        notes += [str(n) for n in dig(train.data, "plan", "notes", default=[]) if n]
        definition = dig(train.data, "summary", "throughput_definition")
        if definition:
            notes.append(str(definition))
    return notes


def profile_name(profile: str) -> str:
    """A bundled profile by its name (``default``), any other by its path."""
    from hyport_lib.report.profiles import default_profiles_dir

    path = Path(profile)
    return path.stem if path.parent == default_profiles_dir() else str(path)


def commands(ctx: Ctx) -> list[str]:
    """``hyport report`` with the run's profile, its parameters that differ from the
    profile's file as ``-p`` and, when only some stages ran, ``--only``."""
    from hyport_lib.report.profiles import load_profile

    t, run = ctx.t, ctx.run
    params = run.parameters if isinstance(run.parameters, dict) else {}
    words = ["hyport", "report"]
    lines = [f"## {t['commands']}", "", t["cmd_intro"], ""]
    base: dict = {}
    if not run.profile:  # the notebooks' own defaults: say so, or the default profile would apply
        words += ["--profile", "none"]
    else:
        words += ["--profile", profile_name(run.profile)]
        try:
            base = load_profile(Path(run.profile))
        except ValueError:
            lines += [t["cmd_full"], ""]
            base = {}
    for key, value in params.items():
        # 300 in the profile is 300.0 once checked: the same; True is not 1.
        same = key in base and base[key] == value and isinstance(base[key], bool) == isinstance(value, bool)
        if not same:
            words += ["-p", f"{key}={cli_value(value)}"]
    only = _only(ctx)
    if only:
        words += ["--only", only]
    command = " ".join(shlex.quote(w) for w in words)
    return lines + fenced(command, "bash")


def cli_value(value) -> str:
    """A parameter as ``-p`` takes it back (strings as they are, the rest as YAML)."""
    import json

    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _only(ctx: Ctx) -> str:
    """``01,03`` when the run planned fewer stages than the notebooks folder holds."""
    from hyport_lib.stages import discover_stages

    try:
        known = [s.id for s in discover_stages()]
    except (OSError, ValueError):
        return ""
    planned = [v.stage for v in ctx.views]
    if not known or planned == known or not set(planned) <= set(known):
        return ""
    return ",".join(v.number for v in ctx.views)


__all__ = ["RENDERERS", "background", "caveats", "commands", "dataset", "headline_table",
           "intro", "stage_section", "title"]
