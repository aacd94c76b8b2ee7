"""A report run as the runner fills it and the index, the drafts and ``run.json`` read it
(kept apart from the runner, so that rendering a run never imports the module that runs one)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from hyport_lib.results import (INTERRUPTED, RESULTS_DIR_ENV, RUN_DIR_ENV, VERDICTS, Provenance, StageRecord,
                                UnreadableResult, read_record, read_result, result_file)
from hyport_lib.stages import read_stage_record, stage_hook
from hyport_lib.utils.typed_records import from_mapping

#: The folder of a run that holds what each stage recorded (``results/NN_name.json``).
RESULTS_DIR = "results"
#: Statuses of a stage that has no verdict (yet).
PENDING, RUNNING, NOT_RUN = "PENDING", "RUNNING", "NOT RUN"
UNFINISHED = (PENDING, RUNNING, INTERRUPTED, NOT_RUN)


@dataclass
class StageOutcome:
    stage: str
    verdict: str
    summary: str = ""
    duration_s: float = 0.0
    notebook: Optional[str] = None  # relative to the run folder
    html: Optional[str] = None
    log: Optional[str] = None
    error: Optional[str] = None
    headline: dict = field(default_factory=dict)
    provenance: Optional[Provenance] = None
    #: Every parameter of the stage as it runs (given or its default), secrets left out.
    parameters: dict = field(default_factory=dict)
    interrupted: bool = False


@dataclass
class ReportRun:
    run_id: str
    run_dir: Path
    profile: Optional[str]
    parameters: dict
    stages: list[StageOutcome]
    versions: dict
    started: str
    finished: str = ""
    unused_parameters: list[str] = field(default_factory=list)
    #: ``running``, ``finished``, ``interrupted`` (a stop signal) or ``killed`` (found dead).
    status: str = "running"
    pid: int = 0
    pid_started: float = 0.0  # the runner's process start time: a reused pid is not it
    host: str = ""
    notes: list[str] = field(default_factory=list)
    #: Stages of the notebooks folder that ``--only`` left out of this run.
    left_out: list[str] = field(default_factory=list)
    #: Where each given parameter came from: ``profile`` or ``-p`` (the rest of a stage's
    #: parameters, in its ``StageOutcome.parameters``, are its declared defaults).
    parameter_sources: dict = field(default_factory=dict)
    #: The hosts of the job and this report's node (``-p nnodes``, ``-p node_rank``): node
    #: K > 0 writes its part in ``<run>/nodes/node<K>/`` (its ``run_dir``).
    nnodes: int = 1
    node_rank: int = 0

    @property
    def root_dir(self) -> Path:
        """The run folder on the shared storage (``run_dir`` itself for node 0)."""
        return Path(self.run_dir) if self.node_rank == 0 else Path(self.run_dir).parents[1]

    @property
    def ok(self) -> bool:
        return self.status == "finished" and all(
            s.verdict not in ("FAIL", *UNFINISHED) for s in self.stages)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["run_dir"] = str(self.run_dir)
        data["ok"] = self.ok
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ReportRun":
        return from_mapping(cls, data)


#: A run folder's state, as the runner writes it.
RUN_JSON = "run.json"


def read_report_run(folder: Path) -> ReportRun:
    """The report run in ``folder`` from its ``run.json``, placed where the folder is now (a
    run folder moved or copied keeps its pages in itself); OSError or ValueError (the
    file named) when there is none or it is no run."""
    path = Path(folder) / RUN_JSON
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds no run")
    return replace(ReportRun.from_dict(data), run_dir=Path(folder))


@dataclass
class StageView:
    """One planned stage as the pages see it. ``result``: its record as written, which the
    drafts' templates read; ``record``: read as the stage's typed result, which its ``show``
    hooks read; a missing, half-written or odd file is no record (``problem`` says why)."""

    outcome: StageOutcome
    result: Optional[dict] = None
    record: Optional[StageRecord] = None
    problem: str = ""

    @property
    def stage(self) -> str:
        return self.outcome.stage

    @property
    def number(self) -> str:
        return self.outcome.stage.partition("_")[0]

    @property
    def verdict(self) -> str:
        return str(self.outcome.verdict or "")

    @property
    def finished(self) -> bool:
        return self.verdict in VERDICTS

    @property
    def has_data(self) -> bool:
        """Finished, with data the stage's own section can show."""
        return self.finished and self.result is not None and bool(read_record(self.result).data)

    @property
    def headline(self) -> dict:
        return (self.record.headline if self.record is not None else {}) or self.outcome.headline

    @property
    def provenance(self) -> Optional[Provenance]:
        return (self.record.provenance if self.record is not None else None) or self.outcome.provenance

    def hook(self, name: str) -> Optional[Callable[[StageRecord], Any]]:
        return stage_hook(self.stage, name)


def read_view(outcome: StageOutcome, results: Path) -> StageView:
    try:
        raw = read_result(result_file(results, outcome.stage))
    except FileNotFoundError:
        return StageView(outcome)
    except UnreadableResult as exc:
        return StageView(outcome, problem=str(exc))
    return StageView(outcome, raw, read_stage_record(outcome.stage, raw))


def load_views(run: ReportRun) -> list[StageView]:
    results = Path(run.run_dir) / RESULTS_DIR
    return [read_view(outcome, results) for outcome in run.stages]


def new_run_dir(output_root: Path) -> tuple[str, Path]:
    """A fresh ``<timestamp>-<random>`` folder; two concurrent runs never share one."""
    output_root.mkdir(parents=True, exist_ok=True)
    while True:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{secrets.token_hex(3)}"
        run_dir = output_root / run_id
        try:
            run_dir.mkdir()
            return run_id, run_dir
        except FileExistsError:
            continue


@contextlib.contextmanager
def run_folder_env(run_dir: Path, extra: Optional[Mapping[str, str]] = None, *,
                   results: Optional[Path] = None) -> Iterator[None]:
    """``run_dir`` as the run folder of what records a result inside the block (through
    ``os.environ``, which a stage's kernel inherits), its results in ``results`` (default
    ``<run_dir>/results``; a node > 0 keeps its own), and ``extra`` variables; each variable
    put back (or removed, when it was unset) afterwards, also when the block raises."""
    values = {RUN_DIR_ENV: str(run_dir), RESULTS_DIR_ENV: str(results or Path(run_dir) / RESULTS_DIR),
              **(extra or {})}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
