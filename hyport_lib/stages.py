"""Stages are discovered from the notebooks folder (``NN_name.ipynb``), each a notebook plus
the package of its name (CONTRIBUTING.md, "Adding a stage"), so adding one edits no list here.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence, runtime_checkable

import hyport_lib
from hyport_lib.display import MISSING
from hyport_lib.params import StageParams, parameter_fields
from hyport_lib.results import StageRecord, StageSummary, read_record

_STAGE_RE = re.compile(r"^(\d{2})_([a-z0-9_]+)\.ipynb$")


@runtime_checkable
class StageContract(Protocol):
    """What a stage's ``hyport_lib.<name>.stage`` module provides (as torchtune's recipes;
    CONTRIBUTING.md, "Adding a stage"): notebook, command and report call these and nothing
    else. A stopped ``run`` leaves what finished on the exception (``exc.partial``)."""

    STAGE: str  # "NN_name", the notebook's stem
    RESULT: type

    def plan(self, params: StageParams) -> Any: ...

    def run(self, plan: Any, *, on_progress: Optional[Callable[[Any], None]] = None) -> Any: ...

    def summarize(self, result: Any) -> StageSummary: ...


@dataclass(frozen=True)
class Stage:
    number: str  # "01"
    name: str  # "environment"
    path: Path

    @property
    def id(self) -> str:
        return f"{self.number}_{self.name}"


def default_notebooks_dir() -> Path:
    """``notebooks/`` beside the package (a source checkout, an editable install)."""
    return Path(hyport_lib.__file__).resolve().parents[1] / "notebooks"


def discover_stages(notebooks_dir: Optional[Path] = None) -> list[Stage]:
    folder = Path(notebooks_dir) if notebooks_dir else default_notebooks_dir()
    if not folder.is_dir():
        raise FileNotFoundError(f"notebooks folder not found: {folder}")
    stages = []
    for path in sorted(folder.iterdir()):
        match = _STAGE_RE.match(path.name)
        if match:
            package = importlib.util.find_spec(f"hyport_lib.{match.group(2)}")
            if package is None or package.submodule_search_locations is None:
                raise ValueError(f"{path}: no package hyport_lib.{match.group(2)} "
                                 f"(a stage is a notebook plus its package)")
            stages.append(Stage(match.group(1), match.group(2), path))
    return stages


def named_stages(wanted: Iterable[str], ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """The stage ids of ``ids`` that ``wanted`` names by number (``1``, ``01``), name
    (``environment``) or id, in the order of ``ids``; and the words that name none."""
    known: dict[str, str] = {}
    for stage in ids:
        number, _, name = stage.partition("_")
        known.update({number: stage, name: stage, stage: stage})
    words = [w.strip() for w in wanted if w.strip()]
    unknown = [w for w in words if w not in known and w.zfill(2) not in known]
    picked = {known.get(w) or known[w.zfill(2)] for w in words if w not in unknown}
    return [s for s in ids if s in picked], unknown


def select_stages(stages: list[Stage], only: Optional[Iterable[str]]) -> list[Stage]:
    """``--only``'s stages (:func:`named_stages`), all of them without it."""
    if not only:
        return list(stages)
    picked, unknown = named_stages(only, [s.id for s in stages])
    if unknown:
        names = ", ".join(s.id for s in stages)
        raise ValueError(f"--only: unknown stage(s) {', '.join(unknown)}; available: {names}")
    return [s for s in stages if s.id in picked]


def stage_hook(stage_id: str, name: str) -> Optional[Callable]:
    """The function ``name`` of stage ``NN_name``'s ``show`` module; None where it has none,
    or the stage has no package here (a record of a stage this checkout does not have)."""
    package = _package(stage_id)
    return None if package is None else getattr(importlib.import_module(f"{package}.show"), name, None)


def read_stage_record(stage_id: str, raw: Any) -> StageRecord:
    """A result file's object, its data read as the stage's ``RESULT`` (as recorded where
    the stage has no package here)."""
    package = _package(stage_id)
    stage = importlib.import_module(f"{package}.stage") if package else None
    return read_record(raw, getattr(stage, "RESULT", None))


def _package(stage_id: str) -> Optional[str]:
    name = stage_id.partition("_")[2]
    package = f"hyport_lib.{name}"
    return package if name and importlib.util.find_spec(package) is not None else None


def stage_part(stage_name: str, part: str) -> ModuleType:
    """``hyport_lib.<stage_name>.<part>`` alone (the others may pull in heavy libraries)."""
    return importlib.import_module(f"hyport_lib.{stage_name}.{part}")


#: What a parameter's doc says its None means: ``...; None: the built-in sample picture``.
_NONE_MEANS = re.compile(r"\bNone:?\s+(.+)$")


def none_text(stage_id: Optional[str], name: str) -> str:
    """A parameter set to None as the pages show it: "–" and what stage ``NN_name`` then does,
    from the parameter's doc (the index's parameters, the compare view's)."""
    package = _package(stage_id) if stage_id else None
    fields = {f.name: f for f in parameter_fields(importlib.import_module(f"{package}.params").Params)} if package else {}
    found = _NONE_MEANS.search(fields[name].spec.doc) if name in fields else None
    return f"{MISSING} ({found.group(1) if found else 'the stage decides'})"


def params_class(stage: Stage) -> type:
    return stage_part(stage.name, "params").Params
