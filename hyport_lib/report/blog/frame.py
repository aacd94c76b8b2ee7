"""What the drafts' frame derives from the run, beyond its recorded values: the profile's
name and the command that reproduces the run. The frame's text is its template's
(``report/templates/blog/blog.md.j2``) and its catalogues'.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import NamedTuple, Optional

from hyport_lib.report.profiles import default_profiles_dir, load_profile
from hyport_lib.report.run import ReportRun, StageView
from hyport_lib.stages import discover_stages


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


def profile_name(profile: str) -> str:
    """The profile as a draft's text names it: its reference, else ``…/<file name>``."""
    return profile_reference(profile) or f"…/{Path(profile).name}"


class Reproduce(NamedTuple):
    """The command that reproduces a run; ``profile_read`` False when the profile's file
    could not be read back, ``profile_local`` True when it lies outside the project (in
    both cases every parameter is passed with ``-p`` after ``--profile none``)."""

    command: str
    profile_read: bool
    profile_local: bool = False


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
    for key, value in parameters.items():
        # 300 in the profile is 300.0 once checked: the same; True is not 1.
        same = key in base and base[key] == value and isinstance(base[key], bool) == isinstance(value, bool)
        if not same:
            words += ["-p", f"{key}={cli_value(value)}"]
    only = _only(views)
    if only:
        words += ["--only", only]
    return Reproduce(" ".join(shlex.quote(w) for w in words), read,
                     profile_local=bool(run.profile) and reference is None)


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
