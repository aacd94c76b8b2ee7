"""The frame of a blog draft: title, introduction, background, caveats and the commands
that reproduce the run. The stages' own parts are :mod:`hyport_lib.report.blog.sections`.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from hyport_lib.drafting.markdown import code, fenced, quote
from hyport_lib.drafting.values import is_number, num
from hyport_lib.report.blog.context import BlogContext
from hyport_lib.report.blog.sections import NO_DATA_YET, recorded_notes, stage_name
from hyport_lib.report.profiles import default_profiles_dir, load_profile
from hyport_lib.stages import discover_stages


def title(ctx: BlogContext) -> list[str]:
    """The heading: the model, the device and the number of cards, as the run recorded them
    (the device and cards the stages found, ``blog_facts``, before the ones asked for)."""
    params = ctx.draft.parameters
    device = ctx.draft.facts.get("device", params.get("device", "auto"))
    values = {"model": code(params.get("model_path", "tiny")), "device": code(device),
              "run_id": code(ctx.run.run_id)}
    cards = ctx.draft.facts.get("cards", params.get("num_cards"))
    if is_number(cards):
        return [f"# {ctx.t['title_cards'].format(cards=num(cards), **values)}", ""]
    return [f"# {ctx.t['title'].format(**values)}", ""]


def intro(ctx: BlogContext) -> list[str]:
    status = ctx.t["status"].get(ctx.run.status, "")
    return [f"{ctx.t['intro'].format(run_id=code(ctx.run.run_id))}{ctx.t['space']}{status}".rstrip(), ""]


def background(ctx: BlogContext) -> list[str]:
    """The porting problem, then which profile ran where."""
    t, run = ctx.t, ctx.run
    profile = code(profile_name(run.profile)) if run.profile else t["defaults"]
    lines = [f"## {t['background']}", "", t["problem"], "",
             t["run_context"].format(profile=profile, host=code(run.host or "?"),
                                     started=code(run.started or "?")), "",
             t["remote_on"] if ctx.draft.parameters.get("trust_remote_code") else t["remote_off"], ""]
    if ctx.run.left_out:
        lines[4:4] = [t["left_out"].format(stages=_left_out(ctx)), ""]
    return lines


def _left_out(ctx: BlogContext) -> str:
    """The stages ``--only`` left out, by name (``02 Attention swap``), as one phrase."""
    return ctx.t["list_sep"].join(stage_name(str(stage), ctx.lang) for stage in ctx.run.left_out)


def caveats(ctx: BlogContext) -> list[str]:
    """Where each stage's figures came from, what failed or did not finish, recorded notes."""
    t = ctx.t
    lines = [f"## {t['caveats']}", "", f"- {t['not_npu']}"]
    for view in ctx.views:
        if view.provenance and view.verdict not in NO_DATA_YET:
            stage = stage_name(view.stage, ctx.lang)
            lines.append(f"- {t['prov_line'].format(stage=stage, prov=ctx.draft.prov(view.provenance))}")
    failed = [v.stage for v in ctx.views if v.verdict == "FAIL"]
    if failed:
        lines.append(f"- {t['failed'].format(stages=', '.join(failed))}")
    if ctx.run.left_out:
        lines.append(f"- {t['left_out_caveat'].format(stages=_left_out(ctx))}")
    unfinished = [v.stage for v in ctx.views if not v.finished]
    if unfinished:
        lines.append(f"- {t['unfinished'].format(stages=', '.join(unfinished))}")
    if ctx.run.unused_parameters:
        names = ", ".join(code(n) for n in ctx.run.unused_parameters)
        lines.append(f"- {t['unused'].format(names=names)}")
    lines.append("")
    for heading, notes in ((t["notes"], recorded_notes(ctx)), (t["figure_failed"], ctx.notes),
                           (t["facts_failed"], ctx.unread_facts)):
        if notes:
            lines += [heading, ""]
            for note in notes:
                lines += quote(note)
    return lines


def profile_name(profile: str) -> str:
    """A bundled profile by its name (``default``), any other by its path."""
    path = Path(profile)
    return path.stem if path.parent == default_profiles_dir() else str(path)


def commands(ctx: BlogContext) -> list[str]:
    """``hyport report`` with the run's profile, its parameters that differ from the
    profile's file as ``-p`` and, when only some stages ran, ``--only``."""
    t, run = ctx.t, ctx.run
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
    for key, value in ctx.draft.parameters.items():
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
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _only(ctx: BlogContext) -> str:
    """``01,03`` when the run planned fewer stages than the notebooks folder holds."""
    try:
        known = [s.id for s in discover_stages()]
    except (OSError, ValueError):
        return ""
    planned = [v.stage for v in ctx.views]
    if not known or planned == known or not set(planned) <= set(known):
        return ""
    return ",".join(v.number for v in ctx.views)
