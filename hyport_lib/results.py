"""Stage results, written to ``$HYPORT_RESULTS_DIR/<stage>.json`` (set by the report runner;
else ``outputs/interactive/results/``) with their provenance, so that a CPU or emulated
figure is never shown as an NPU one.

Outside a report run, each record is also kept as ``history/<run-id>/<stage>.json`` beside
the results folder (the latest stays where stage 05 and the show modules read it): an
interactive run is never lost to the next one, and two can be compared
(:mod:`hyport_lib.workbook.compare`). A report run folder keeps its own results, so
nothing is duplicated there.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Optional, TypeVar

from hyport_lib.params import StageParams
from hyport_lib.utils.files import atomic_write_json, ensure_writable
from hyport_lib.utils.records import from_mapping
from hyport_lib.utils.redact import scrub_obj

D = TypeVar("D")

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
VERDICTS = (PASS, WARN, FAIL, SKIP)
#: A proof's verdict (not a stage's) when the model declares it cannot take the swap.
REFUSED = "REFUSED"
#: A stage's verdict may also say it was stopped (Ctrl-C, Kernel → Interrupt, a Stop
#: button) before it finished: what finished is recorded, and never judged as a whole.
INTERRUPTED = "INTERRUPTED"
STAGE_VERDICTS = (*VERDICTS, INTERRUPTED)
RESULTS_DIR_ENV = "HYPORT_RESULTS_DIR"
#: The report run's folder, set by the report runner for each stage it runs (unset in an
#: interactive session): stages find this run's other outputs under it.
RUN_DIR_ENV = "HYPORT_RUN_DIR"
#: Beside the interactive results folder: one folder per recorded run.
HISTORY_DIR = "history"


@dataclass
class Provenance:
    """Where a figure came from."""

    device: str  # npu | cuda | cpu
    emulated: bool = False  # computed by hyport's NPU emulation, not by an NPU

    @property
    def label(self) -> str:
        if self.emulated:
            return f"NPU-emulated on {self.device.upper()} (not an NPU measurement)"
        if self.device == "npu":
            return "NPU"
        if self.device == "cuda":
            return "CUDA GPU"
        return "CPU (not an NPU measurement)"

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label}


@dataclass
class StageResult:
    stage: str
    verdict: str
    summary: str = ""
    headline: dict[str, Any] = field(default_factory=dict)
    provenance: Optional[dict] = None
    data: dict[str, Any] = field(default_factory=dict)
    recorded_at: str = ""
    #: The stage's effective parameters (every field, not only the changed ones); {} when
    #: the caller recorded none.
    params: dict[str, Any] = field(default_factory=dict)
    #: The run's folder under ``history/`` ("" in a report run: its folder is the run).
    run_id: str = ""

    def __post_init__(self):
        self.verdict = self.verdict.upper()
        if self.verdict not in STAGE_VERDICTS:
            raise ValueError(f"verdict={self.verdict!r}: expected one of {', '.join(STAGE_VERDICTS)}")
        if not self.stage:
            raise ValueError("stage must be a non-empty name such as '01_environment'")


@dataclass
class StageRecord(Generic[D]):
    """A recorded result as the show modules read it back: :class:`StageResult`'s fields,
    unchecked (an odd verdict shows as recorded), ``data`` typed; :meth:`from_dict` never
    raises for a shape problem (:mod:`hyport_lib.utils.records`)."""

    stage: Optional[str] = None
    verdict: Optional[str] = None
    summary: str = ""
    headline: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    data: Any = None
    recorded_at: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    run_id: str = ""

    @classmethod
    def from_dict(cls, record: Any, data_type: type[D]) -> "StageRecord[D]":
        """``record`` (a result file's object) with its ``data`` read as ``data_type``
        (through ``data_type.from_dict``)."""
        read = from_mapping(cls, record)
        read.data = data_type.from_dict(read.data)
        return read


@dataclass
class TrainedWeights:
    """What stage 04 hands to stage 05: in its result's data (:meth:`to_dict`'s keys), read
    back with :meth:`from_dict` (stages never import one another, so it lives here)."""

    #: The result (``<results>/<stage>.json``) that holds it, and the stage's name as
    #: parameters name it (``written_by``).
    STAGE: ClassVar[str] = "04_train"
    STAGE_NAME: ClassVar[str] = "train"

    final_dir: Optional[str] = None  # None: the training wrote no final weights
    last_checkpoint: Optional[str] = None  # the last complete one
    model_path: Optional[str] = None  # the model the training started from

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "TrainedWeights":
        """The hand-over in a stage-04 result's data; an older or odd record gives None
        where it differs."""
        return from_mapping(cls, data)


@dataclass
class StageSummary:
    """What a stage's ``summarize(result)`` returns: the verdict, one line, a few figures."""

    verdict: str
    summary: str
    headline: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def results_dir() -> Path:
    """``$HYPORT_RESULTS_DIR``, else ``outputs/interactive/results`` of the checkout (not of
    the working directory: a notebook in ``notebooks/`` writes into the ignored ``outputs/``)."""
    env = os.environ.get(RESULTS_DIR_ENV)
    if env:
        return Path(env)
    project = Path(__file__).resolve().parents[1]
    base = project if (project / "pyproject.toml").exists() else Path.cwd()
    return base / "outputs" / "interactive" / "results"


def ensure_results_dir(directory: Optional[os.PathLike] = None) -> Path:
    """The results folder, created and writable; checked by commands before any work, so
    that an hour's run never ends in a traceback about where to write its result.

    Raises:
        PermissionError: naming the folder (and ``HYPORT_RESULTS_DIR`` when it set it).
    """
    folder = Path(directory) if directory else results_dir()
    try:
        ensure_writable(folder)
    except OSError as exc:
        via = f" (${RESULTS_DIR_ENV})" if os.environ.get(RESULTS_DIR_ENV) and not directory else ""
        raise PermissionError(exc.errno, f"the results folder {folder}{via} is not writable "
                                         f"({exc.strerror}); pass --no-record or fix it", str(folder)) from None
    return folder


def record_result(stage: str, verdict: str, *, summary: str = "",
                  headline: Optional[dict] = None, data: Optional[dict] = None,
                  provenance: Optional[Provenance] = None,
                  params: Optional[StageParams] = None,
                  directory: Optional[os.PathLike] = None) -> Path:
    """Write one stage's result (``stage``: ``"01_environment"``) atomically; its path.
    ``headline``: a few figures for the index; ``data``: anything JSON-serialisable;
    ``params``: the parameters the stage ran with. Into the default folder outside a report
    run, the record is first kept under :func:`history_dir` too (``run_id`` names it)."""
    now = _dt.datetime.now(_dt.timezone.utc)
    keep = directory is None and not os.environ.get(RUN_DIR_ENV)
    result = StageResult(
        stage=stage, verdict=verdict, summary=summary, headline=dict(headline or {}),
        provenance=provenance.to_dict() if provenance else None, data=dict(data or {}),
        recorded_at=now.isoformat(timespec="seconds"),
        params=params.to_dict() if params is not None else {},
        run_id=new_run_id(stage, now) if keep else "",
    )
    # Through JSON first (default=str turns any object into text), then scrub every
    # string: no secret value survives in any field, escaped or not.
    record = scrub_obj(json.loads(json.dumps(asdict(result), default=str)))
    if keep:
        atomic_write_json(result_file(history_dir() / result.run_id, stage), record)
    return atomic_write_json(result_file(Path(directory) if directory else results_dir(), stage), record)


def new_run_id(stage: str, when: _dt.datetime) -> str:
    """``20250131-142501-04_train-3fa9c2``: sorts by time (local, the clock of the report
    run folders it is listed with), says the stage, and two runs recorded in the same
    second still get their own folders."""
    return f"{when.astimezone().strftime('%Y%m%d-%H%M%S')}-{stage}-{secrets.token_hex(3)}"


def history_dir() -> Path:
    """Where interactive runs are kept: ``history/`` beside :func:`results_dir`."""
    return results_dir().parent / HISTORY_DIR


def result_file(directory: os.PathLike, stage: str) -> Path:
    """Where stage ``stage`` (``"01_environment"``) records its result in ``directory``."""
    return Path(directory) / f"{stage}.json"


class UnreadableResult(ValueError):
    """A result file that is there but holds no JSON object (half-written by a killed
    kernel, or not a result); ``reason``: the parser's message."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path.name}: {reason}")
        self.path, self.reason = path, reason


def read_result(path: os.PathLike) -> dict:
    """The one reader of result files: the recorded JSON object, as written (an older or odd
    record still shows what it holds; :func:`load_result` checks it).

    Raises:
        FileNotFoundError: no such file (the stage recorded nothing).
        UnreadableResult: the file is there but holds no JSON object.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnreadableResult(path, str(exc)) from exc
    if not isinstance(raw, dict):
        raise UnreadableResult(path, "not a JSON object")
    return raw


def load_result(path: os.PathLike) -> StageResult:
    """Read a result file back as a checked :class:`StageResult`; a ValueError naming the
    file when it is missing, unreadable or not a valid result."""
    path = Path(path)
    try:
        return StageResult(**read_result(path))
    except UnreadableResult as exc:
        raise ValueError(f"{path}: not a valid hyport result ({exc.reason})") from exc
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a valid hyport result ({exc})") from exc


def record_summary(stage: str, summary: StageSummary, *, data: Optional[dict] = None,
                   provenance: Optional[Provenance] = None, params: Optional[StageParams] = None,
                   directory: Optional[os.PathLike] = None) -> Path:
    """:func:`record_result` for a :class:`StageSummary`: what every stage's ``record`` calls."""
    return record_result(stage, summary.verdict, summary=summary.summary,
                         headline=summary.headline, data=data, provenance=provenance,
                         params=params, directory=directory)


def fresh_folder_beside_results(kind: str, name: str = "") -> Path:
    """A new folder ``<results>/../<kind>/[<name>-]<stamp>-<pid>`` (not created): where a
    stage run outside a report keeps its logs or outputs, one folder per run."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    leaf = f"{name}-{stamp}-{os.getpid()}" if name else f"{stamp}-{os.getpid()}"
    return (results_dir().parent / kind / leaf).resolve()
