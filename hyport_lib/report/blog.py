"""Blog-post drafts of a run, ``blog.en.md`` (also as ``blog.md``) and ``blog.zh.md``, and
their figures, ``<run>/figures/<name>.png``, shaped as the seed's write-up of a bring-up
(the templates: :mod:`hyport_lib.drafting`). Every number is copied from the run's recorded
files with its provenance; a partial run never makes the drafts raise.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from hyport_lib.display import png_bytes
from hyport_lib.drafting.templates import FRAME_TEMPLATE, LANGS, environment, has_template, stage_template, tidy
from hyport_lib.report.nodes import NODE_RANK, read_node_runs, run_shape
from hyport_lib.report.paths import default_profiles_dir, relative_text, shown_profile
from hyport_lib.report.run import NOT_RUN, PENDING, RESULTS_DIR, RUNNING, ReportRun, StageView, load_views
from hyport_lib.report.run_parameters import load_profile
from hyport_lib.results import INTERRUPTED, result_file
from hyport_lib.stages import discover_stages, stage_hook
from hyport_lib.utils.files import atomic_write_bytes, atomic_write_text
from hyport_lib.utils.redact import scrub_text

#: File name -> language. ``blog.md`` is the English draft under its historical name.
DRAFTS = {"blog.md": "en", "blog.en.md": "en", "blog.zh.md": "zh"}
FIGURES_DIR = "figures"
#: Statuses of a stage that has recorded nothing yet (nor will, in this run).
NO_DATA_YET = (PENDING, RUNNING, NOT_RUN)


def render_blog(run: ReportRun, lang: str = "en", *, figures: Optional[dict] = None,
                notes: Optional[list] = None, views: Optional[list[StageView]] = None) -> str:
    """The draft in ``lang`` as Markdown, scrubbed, its paths relative to the run (ValueError
    for a language there is no text for). ``figures`` and ``notes``: what
    :func:`draw_figures` drew and met."""
    template = environment(lang).get_template(FRAME_TEMPLATE)
    views = load_views(run) if views is None else views
    text = template.render(build_context(run, views, figures or {}, notes or []))
    return relative_text(scrub_text(tidy(text)), run.root_dir, "markdown")


def write_blog_drafts(run: ReportRun, views: Optional[list[StageView]] = None) -> list[Path]:
    """Write the :data:`DRAFTS` and their figures atomically; the drafts, in that order."""
    views = load_views(run) if views is None else views
    figures, problems = draw_figures(Path(run.run_dir), views)
    texts = {lang: render_blog(run, lang, figures=figures, notes=problems, views=views)
             for lang in LANGS}
    return [atomic_write_text(Path(run.run_dir) / name, texts[lang]) for name, lang in DRAFTS.items()]


# --------------------------------------------------------------------------- figures
def draw_figures(run_dir: Path, views: list[StageView]) -> tuple[dict[str, str], list[str]]:
    """Draw what each stage's ``show.blog_figures`` allows: ``({name: path relative to the
    run folder}, [why a figure is missing])``; a figure that cannot be drawn is left out."""
    figures: dict[str, str] = {}
    problems: list[str] = []
    drawn_by: dict[str, str] = {}
    for view in views:
        named = view.hook("blog_figures")
        if named is None or not view.finished or view.record is None:
            continue
        try:
            makers = named(view.record)
        except Exception as exc:  # noqa: BLE001 — odd recorded data: the drafts go on
            problems.append(f"{view.stage}: {type(exc).__name__}: {exc}")
            continue
        for name, make in makers.items():
            relative = f"{FIGURES_DIR}/{name}.png"
            if name in drawn_by:  # a file name is one figure: the first stage keeps it
                problems.append(f"{relative}: {view.stage} draws it too; {drawn_by[name]}'s is kept")
                continue
            drawn_by[name] = view.stage
            try:
                path = _draw(Path(run_dir), relative, view.stage, make)
            except Exception as exc:  # noqa: BLE001 — matplotlib or odd data: the drafts go on
                problems.append(f"{relative}: {type(exc).__name__}: {exc}")
                continue
            if path is not None:
                figures[name] = relative
    return figures, problems


def _draw(run_dir: Path, relative: str, stage: str, make: Callable) -> Optional[Path]:
    """The PNG, redrawn only when the stage's result file is newer; None when no data."""
    target = run_dir / relative
    source = result_file(run_dir / RESULTS_DIR, stage)
    if target.is_file() and source.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    fig = make()
    if fig is None:
        if target.is_file():
            target.unlink()  # an older figure no longer matches what was recorded
        return None
    # the figures are bare matplotlib Figures: nothing to close
    return atomic_write_bytes(target, png_bytes(fig))


# --------------------------------------------------------------------------- the templates' context
@dataclass
class StagePart:
    """One stage as the drafts' templates see it."""

    stage: str  # NN_name
    template: Optional[str]  # its own template; None: its headline is shown as a table
    view: Optional[StageView]  # None for a stage the run left out (``--only``)
    record: Any  # what its section is drawn from: the record as written, None with no data to show

    @property
    def number(self) -> str:
        return self.stage.partition("_")[0]

    @property
    def name(self) -> str:
        """Its title where it has no template."""
        return self.stage.partition("_")[2].replace("_", " ")


def _part(stage: str, view: Optional[StageView]) -> StagePart:
    template = stage_template(stage.partition("_")[2])
    record = view.result if view is not None and view.has_data else None
    return StagePart(stage, template if has_template(template) else None, view, record)


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
    """Notes the run and its stages (``blog_notes``) recorded that qualify the figures."""
    notes = [str(n) for n in run.notes]
    for view in views:
        give = view.hook("blog_notes")
        if view.record is not None and give is not None:
            notes += give(view.record)
    return notes


def build_context(run: ReportRun, views: list[StageView], figures: dict, notes: list) -> dict:
    """The variables of the drafts' templates (the same in every language)."""
    facts, unread = stage_facts(views)
    parts = [_part(view.stage, view) for view in views]
    left_out = [_part(str(stage), None) for stage in run.left_out]
    # The sections stages add after theirs, in the stages' order, a stage left out told so.
    appendices = sorted((p for p in parts + left_out if p.template), key=lambda p: p.stage)
    # several hosts: each node's part of the run, as its run.json says now
    nodes = read_node_runs(run.root_dir, run.nnodes, own=run.to_dict()) if run.nnodes > 1 else []
    return {"run": run, "parameters": run.parameters, "facts": facts, "host": run.host,
            "shape": run_shape(facts, run.nnodes), "nodes": nodes,
            "versions": run.versions, "figures": dict(figures), "profile": shown_profile(run.profile, run.run_dir),
            "stages": parts, "left_out": left_out,
            "appendices": appendices, "figure_problems": list(notes), "unread_facts": unread,
            "recorded_notes": lambda: recorded_notes(run, views), "no_data_yet": NO_DATA_YET,
            "interrupted": INTERRUPTED, "reproduce": lambda: reproduce_command(run, run.parameters, views),
            "values": _values}


def _values(part: StagePart) -> dict:
    """What the stage's ``blog_values`` derives from its record for its template ({} without)."""
    derive = stage_hook(part.stage, "blog_values")
    return derive(part.view.record) if derive is not None and part.record is not None else {}


# --------------------------------------------------------------------------- the command that reproduces a run
def profile_reference(profile: str) -> Optional[str]:
    """How a command run from the project folder names the profile: a bundled one by its
    name (``default``), one inside the project by its relative path; None for a file
    elsewhere on this host, whose absolute path a draft must not carry."""
    path, project = Path(profile), default_profiles_dir().parent
    if path.parent == default_profiles_dir():
        return path.stem
    if path.is_absolute() and path.is_relative_to(project):
        return path.relative_to(project).as_posix()
    return None if path.is_absolute() else profile


class Reproduce(NamedTuple):
    """``profile_read`` False when the profile's file could not be read back,
    ``profile_local`` True when it lies outside the project (in both cases every parameter
    is passed with ``-p`` after ``--profile none``)."""

    command: str
    profile_read: bool
    profile_local: bool = False
    #: Several hosts: the command is every node's, its rank and the shared run folder
    #: left to the shell variables :data:`NODE_RANK_VARIABLE` and :data:`RUN_DIR_VARIABLE`.
    nnodes: int = 1


#: The shell variables of the multi-node reproduce command: each node's rank, the shared folder.
NODE_RANK_VARIABLE, RUN_DIR_VARIABLE = "NODE_RANK", "RUN_DIR"


def reproduce_command(run: ReportRun, parameters: dict, views: list[StageView]) -> Reproduce:
    """``hyport report`` with the run's profile, its parameters that differ from the
    profile's file as ``-p`` and, when only some stages ran, ``--only``."""
    words = ["hyport", "report"]
    base: dict = {}
    read, reference = True, profile_reference(run.profile) if run.profile else None
    if reference is None:  # no profile, or a local file: --profile none, or the default would apply
        words += ["--profile", "none"]
    else:
        try:
            base = load_profile(Path(run.profile))
            words += ["--profile", reference]
        except ValueError:
            read = False
            words += ["--profile", "none"]
    several = run.nnodes > 1
    for key, value in parameters.items():
        if several and key == NODE_RANK:
            continue  # each node's own, below
        # 300 in the profile is 300.0 once checked: the same; True is not 1.
        same = key in base and base[key] == value and isinstance(base[key], bool) == isinstance(value, bool)
        if not same:
            words += ["-p", f"{key}={cli_value(value)}"]
    only = _only(views)
    if only:
        words += ["--only", only]
    command = " ".join(shlex.quote(w) for w in words)
    if several:  # unquoted: the shell puts in each node's values
        command += f' -p {NODE_RANK}="${NODE_RANK_VARIABLE}" --run-dir "${RUN_DIR_VARIABLE}"'
    return Reproduce(command, read, profile_local=bool(run.profile) and reference is None, nnodes=run.nnodes)


def cli_value(value) -> str:
    """A parameter as ``-p`` takes it back (strings as they are, the rest as YAML)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _only(views: list[StageView]) -> str:
    """``01,03`` when the run planned fewer stages than the notebooks folder holds."""
    try:
        known = [s.id for s in discover_stages()]
    except (OSError, ValueError):
        return ""
    planned = [v.stage for v in views]
    if not known or planned == known or not set(planned) <= set(known):
        return ""
    return ",".join(v.number for v in views)
