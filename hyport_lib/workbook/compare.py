"""Two (or more) recorded runs side by side: what changed between the CPU emulation run and
an NPU run, between two profiles, between yesterday and today.

A run is a folder of stage results: an interactive run kept under ``history/<run-id>/`` or
a report run's ``<run>/results/``. What every record has (verdict, headline, parameters) is
compared here; what differs in a stage's own result, its ``show.compare`` hook says (a
:class:`StageComparison`). :mod:`hyport_lib.workbook.compare_show` renders it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import pandas as pd

from hyport_lib.results import (
    HISTORY_DIR, INTERACTIVE_DIR, StageRecord, UnreadableResult, history_dir, outputs_dir, read_result,
)
from hyport_lib.stages import named_stages, none_text, read_stage_record, stage_hook

#: A stage's result file: ``NN_name.json``.
_STAGE_FILE = re.compile(r"^(\d{2}_[a-z0-9_]+)\.json$")
#: The report runner's results folder inside a run folder (hyport_lib.report.run.RESULTS_DIR,
#: which this utility layer may not import).
_REPORT_RESULTS = "results"


@dataclass(frozen=True)
class Run:
    """A folder of stage results."""

    id: str
    kind: str  # interactive (one stage run kept under history/) or report
    folder: Path  # holds <stage>.json
    stages: tuple[str, ...]
    #: "A", "B", ... in a comparison, with :func:`run_title`: what its tables call it
    letter: str = field(default="", compare=False)
    title: str = field(default="", compare=False)

    @property
    def tag(self) -> str:
        """``A (smoke · NN_stage · 2025-01-31 14:25:01)`` in a comparison, else its id."""
        return f"{self.letter} ({self.title})" if self.letter else self.id

    @property
    def root(self) -> Path:
        """A report run's folder (its index, ``results/``), or the history one."""
        return self.folder.parent if self.kind == "report" and self.folder.name == _REPORT_RESULTS else self.folder

    def record(self, stage: str) -> StageRecord:
        """Its data typed; ValueError naming the file when unreadable."""
        path = self.folder / f"{stage}.json"
        # The file by its name only: the message lands in compare.html, which may be sent on.
        try:
            return read_stage_record(stage, read_result(path))
        except FileNotFoundError:
            raise ValueError(f"run {self.id}: no {path.name}") from None
        except UnreadableResult as exc:
            reason = exc.reason.replace(str(path), path.name)
            raise ValueError(f"run {self.id}: {path.name} is not a result ({reason})") from None


@dataclass(frozen=True)
class RunSummary:
    """What a run is called by people: the ``run_name`` its records hold, its stages, its
    local time and every stage's verdict (the picker's line, the compare headers)."""

    run: Run
    name: str  # "" when no record holds a run_name
    when: str  # local time, "2025-01-31 14:25:01"; "" when neither its id nor a record says
    verdicts: tuple[tuple[str, str], ...]  # (stage, verdict as recorded)

    @property
    def title(self) -> str:
        """``smoke · NN_stage · 2025-01-31 14:25:01``; a report run names its stages by number."""
        numbers = " ".join(s.split("_", 1)[0] for s in self.run.stages)
        held = self.run.stages[0] if self.run.kind == "interactive" else f"report {numbers}"
        return " · ".join(t for t in (self.name, held, self.when) if t)

    @property
    def label(self) -> str:
        """The title and the verdicts: ``smoke · NN_stage · 2025-01-31 14:25:01 · PASS``."""
        if len(self.verdicts) == 1:
            verdicts = self.verdicts[0][1]
        else:
            verdicts = ", ".join(f"{stage.split('_', 1)[0]} {verdict}" for stage, verdict in self.verdicts)
        return f"{self.title} · {verdicts}"


#: A run id's start: its local time (``new_run_id`` and the report's run folders alike).
_STAMP = re.compile(r"^(\d{8}-\d{6})")


def summarize_run(run: Run) -> RunSummary:
    """Its name, time and verdicts from its records (an unreadable one reads ``unreadable``)."""
    names, verdicts, recorded = [], [], []
    for stage in run.stages:
        try:
            raw = read_result(run.folder / f"{stage}.json")
        except (FileNotFoundError, UnreadableResult):
            verdicts.append((stage, "unreadable"))
            continue
        verdicts.append((stage, str(raw.get("verdict") or "no verdict")))
        params = raw.get("params") if isinstance(raw.get("params"), dict) else {}
        if isinstance(params.get("run_name"), str) and params["run_name"]:
            names.append(params["run_name"])
        if isinstance(raw.get("recorded_at"), str):
            recorded.append(raw["recorded_at"])
    return RunSummary(run, ", ".join(dict.fromkeys(names)), _local_time(run.id, recorded), tuple(verdicts))


def _local_time(run_id: str, recorded: list[str]) -> str:
    """The id's stamp (local already), else the first record's time made local."""
    if m := _STAMP.match(run_id):
        return _dt.datetime.strptime(m.group(1), "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    for text in sorted(recorded):
        try:
            return _dt.datetime.fromisoformat(text).astimezone().strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            continue
    return ""


def presence(present: Sequence[Run], runs: Sequence[Run], values: Iterable[Any] = ()) -> str:
    """How a row (a stage, a case, a figure) reads across ``runs``: ``only in A (smoke · …)``
    when not every run has it, else ``differs`` or ``same`` by its ``values``."""
    if len(present) < len(runs):
        return "only in " + ", ".join(r.tag for r in present)
    return "differs" if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1 else "same"


def _stages_in(folder: Path) -> tuple[str, ...]:
    if not folder.is_dir():
        return ()
    return tuple(sorted(m.group(1) for p in folder.iterdir() if (m := _STAGE_FILE.match(p.name)) and p.is_file()))


def list_runs(outputs: Optional[Path] = None) -> list[Run]:
    """Every recorded run, newest first (the ids begin with their local time): each report
    run folder under ``outputs`` and every interactive run (a report never writes into a history)."""
    history = history_dir()
    outputs = Path(outputs) if outputs else outputs_dir()
    runs = []
    for folder in sorted(history.iterdir()) if history.is_dir() else ():
        if stages := _stages_in(folder):
            runs.append(Run(folder.name, "interactive", folder, stages))
    for folder in sorted(outputs.iterdir()) if outputs.is_dir() else ():
        if folder.name != INTERACTIVE_DIR and (stages := _stages_in(folder / _REPORT_RESULTS)):
            runs.append(Run(folder.name, "report", folder / _REPORT_RESULTS, stages))
    return sorted(runs, key=lambda r: r.id, reverse=True)


def find_run(ref: Any, outputs: Optional[Path] = None) -> Run:
    """A run from a folder (a report run folder, its ``results/``, a history run folder)
    or a run id (or the start of one); ValueError naming ``ref`` and the runs there are."""
    if isinstance(ref, Run):
        return ref
    path = Path(str(ref)).expanduser()
    if path.is_dir():
        path = path.resolve()  # absolute, as the records' own paths are (a run's folders compare equal)
        if stages := _stages_in(path / _REPORT_RESULTS):
            return Run(path.name, "report", path / _REPORT_RESULTS, stages)
        if stages := _stages_in(path):
            if path.parent.name == HISTORY_DIR:
                return Run(path.name, "interactive", path, stages)
            return Run(path.parent.name if path.name == _REPORT_RESULTS else path.name, "report", path, stages)
        raise ValueError(f"run {ref}: the folder holds no stage result (NN_stage.json, or results/NN_stage.json)")
    runs = list_runs(outputs)
    matches = [r for r in runs if r.id == str(ref)] or [r for r in runs if r.id.startswith(str(ref))]
    if len(matches) == 1:
        return matches[0]
    where = Path(outputs) if outputs else outputs_dir()
    known = ", ".join(r.id for r in runs[:6]) + (" …" if len(runs) > 6 else "") or "none"
    what = "matches several runs" if matches else "no such run folder or run id"
    raise ValueError(f"run {ref!r}: {what} under {where} or {history_dir()} (runs: {known})")


@dataclass(frozen=True)
class RunRecord:
    """One run's record of one stage, as a ``compare`` hook gets it."""

    run: Run
    record: StageRecord

    @property
    def label(self) -> str:
        """``A (smoke · NN_stage · 2025-01-31 14:25:01) (CPU (not an NPU measurement))`` (the run's
        id outside a comparison): a CPU or emulated run is never read as an NPU one."""
        return f"{self.run.tag} ({self.source})"

    @property
    def source(self) -> str:
        """Where its figures came from: ``CPU (not an NPU measurement)``."""
        provenance = self.record.provenance
        return provenance.label if provenance else "provenance not recorded"


@dataclass
class Part:
    """A table or a figure a stage's ``compare`` hook shows: ``frame`` as shown, or
    ``figure`` drawing a matplotlib Figure on demand (None: nothing to draw), and ``spec``
    the same figure as an interactive Vega-Lite spec where JupyterLab draws it (the page
    and the report keep the figure's PNG); ``empty``: what an empty ``frame`` says (what was
    compared), instead of "nothing to compare"."""

    name: str
    title: str
    frame: pd.DataFrame
    figure: Optional[Callable[[], Any]] = None
    spec: Optional[Callable[[], Optional[dict]]] = None
    empty: str = ""


#: The columns of :attr:`StageComparison.throughput` and :attr:`Comparison.throughput`.
THROUGHPUT_COLUMNS = ["run", "label", "stage", "measure", "tokens_per_s"]


@dataclass
class StageComparison:
    """What a stage's ``show.compare(runs: list[RunRecord])`` finds between its runs."""

    parts: list[Part] = field(default_factory=list)
    #: :data:`THROUGHPUT_COLUMNS`: the stage's tokens/s, shown beside the other stages'
    throughput: Optional[pd.DataFrame] = None


@dataclass
class Comparison:
    """Runs side by side; every frame is tidy (one row per run and thing), the stages'
    :attr:`parts` as they are shown."""

    runs: list[Run]
    stages: list[str]
    #: stage, run, label, source, verdict, summary, recorded_at (every stage of every run)
    overview: pd.DataFrame
    #: stage, key, run, value (the index figures of every stage)
    headlines: pd.DataFrame
    #: stage, parameter, run, value (as text): the parameters each record holds
    parameters: pd.DataFrame
    throughput: pd.DataFrame  # THROUGHPUT_COLUMNS: what the stages' hooks measured
    #: the stages' own tables and figures, in the stages' order
    parts: list[Part] = field(default_factory=list)
    #: runs that lack a stage the others have, unreadable records
    notes: list[str] = field(default_factory=list)
    #: (run id, stage) of each record that is there but unreadable: not a stage the run lacks
    unreadable: set[tuple[str, str]] = field(default_factory=set)

    def part(self, name: str) -> Optional[Part]:
        return next((p for p in self.parts if p.name == name), None)


def compare_runs(refs: Sequence[Any], *, stages: Optional[Iterable[str]] = None,
                 outputs: Optional[Path] = None) -> Comparison:
    """The runs ``refs`` (:func:`find_run`) on ``stages`` (as ``--only`` takes them; default:
    every stage any of them recorded); ValueError for fewer than two runs, the same run
    twice, a run that cannot be found, or a stage none of them recorded."""
    runs = [find_run(ref, outputs) for ref in refs]
    runs = [replace(run, letter=chr(ord("A") + i) if i < 26 else str(i + 1), title=summarize_run(run).title)
            for i, run in enumerate(runs)]
    if len(runs) < 2:
        raise ValueError(f"compare: name two runs or more (got {len(runs)})")
    if len({r.folder.resolve() for r in runs}) < len(runs):
        raise ValueError(f"compare: the same run twice ({', '.join(r.id for r in runs)})")
    recorded = sorted({s for r in runs for s in r.stages})
    wanted = recorded
    if stages:
        wanted, unknown = named_stages(stages, recorded)
        if unknown or not wanted:
            raise ValueError(f"--stage {', '.join(unknown) or repr('')}: not a stage these runs recorded "
                             f"(recorded: {', '.join(recorded) or 'none'})")
    notes, records, unreadable = [], {}, set()
    for run in runs:
        for stage in wanted:
            if stage not in run.stages:
                notes.append(f"run {run.id} has no {stage} result")
                continue
            try:
                records[run.id, stage] = run.record(stage)
            except ValueError as exc:
                notes.append(str(exc))
                unreadable.add((run.id, stage))
    by_stage = {s: [RunRecord(r, records[r.id, s]) for r in runs if (r.id, s) in records] for s in wanted}
    found = [hook(pairs) for s, pairs in by_stage.items() if (hook := stage_hook(s, "compare"))]
    measured = [f.throughput for f in found if f.throughput is not None and not f.throughput.empty]
    throughput = pd.concat(measured, ignore_index=True) if measured else pd.DataFrame(columns=THROUGHPUT_COLUMNS)
    return Comparison(runs, wanted, _overview(by_stage), _headlines(by_stage), _parameters(by_stage, notes),
                      throughput, [p for f in found for p in f.parts], notes, unreadable)


def _overview(by_stage: dict[str, list[RunRecord]]) -> pd.DataFrame:
    rows = [{"stage": stage, "run": r.run.id, "label": r.label, "source": r.source, "verdict": r.record.verdict,
             "summary": r.record.summary, "recorded_at": r.record.recorded_at}
            for stage, pairs in by_stage.items() for r in pairs]
    return pd.DataFrame(rows, columns=["stage", "run", "label", "source", "verdict", "summary", "recorded_at"])


def _headlines(by_stage: dict[str, list[RunRecord]]) -> pd.DataFrame:
    rows = [{"stage": stage, "key": key, "run": r.run.id, "value": value}
            for stage, pairs in by_stage.items() for r in pairs for key, value in r.record.headline.items()]
    return pd.DataFrame(rows, columns=["stage", "key", "run", "value"])


def _parameters(by_stage: dict[str, list[RunRecord]], notes: list[str]) -> pd.DataFrame:
    rows = []
    for stage, pairs in by_stage.items():
        for r in pairs:
            if not r.record.params:  # an older record: "–" under every parameter would read as a difference
                notes.append(f"run {r.run.id}: its {stage} record holds no parameters")
            rows += [{"stage": stage, "parameter": name, "run": r.run.id, "value": _value_text(value, r.run, stage, name)}
                     for name, value in r.record.params.items()]
    return pd.DataFrame(rows, columns=["stage", "parameter", "run", "value"])


def _value_text(value: Any, run: Run, stage: str, name: str) -> str:
    """A path inside the run's folder as ``<run>/…`` (no local folder on a page sent on, and
    two runs' own folders compare equal), None as the index shows it (``– (what the stage then
    does)``), the rest as JSON (a list ``["float16"]`` and a text ``float16`` stay apart)."""
    if value is None:
        return none_text(stage, name)
    if isinstance(value, str) and os.path.isabs(value) and Path(value).is_relative_to(run.root):
        return Path("<run>", Path(value).relative_to(run.root)).as_posix()
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
