"""Stage results, written to ``$HYPORT_RESULTS_DIR/<stage>.json`` (set by the report runner;
else ``interactive/results/`` of the outputs folder, :func:`outputs_dir`) with their provenance, so that a CPU or emulated
figure is never shown as an NPU one.

Outside a report run, each record is also kept as ``history/<run-id>/<stage>.json`` beside
the results folder (the latest stays where stage 05 and the show modules read it): an
interactive run is never lost to the next one, and two can be compared.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Iterable, Optional, TypeVar

from hyport_lib.params import StageParams
from hyport_lib.utils.files import atomic_write_json, ensure_writable
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.typed_records import from_mapping, to_mapping

D = TypeVar("D")

#: The verdict of a check, a case, a proof and a finished stage.
PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
VERDICTS = (PASS, WARN, FAIL, SKIP)
#: A stage's verdict may also say it was stopped (Ctrl-C, Kernel → Interrupt, a Stop
#: button) before it finished: what finished is recorded, and never judged as a whole.
INTERRUPTED = "INTERRUPTED"
STAGE_VERDICTS = (*VERDICTS, INTERRUPTED)
#: A proof's verdict when the swap says plainly that it cannot serve the model: a limit to
#: know, not a wrong result.
REFUSED = "REFUSED"
#: Severity used to take the worst verdict; SKIP does not count.
SEVERITY = {"PASS": 0, "WARN": 1, "FAIL": 2}
RESULTS_DIR_ENV = "HYPORT_RESULTS_DIR"
#: The outputs folder (default ``./outputs``): report runs and ``interactive/`` are under it.
OUTPUTS_ENV = "HYPORT_OUTPUTS"
#: The folder of the outputs folder holding interactive results, logs and history.
INTERACTIVE_DIR = "interactive"
#: The report run's folder, set by the report runner for each stage it runs (unset in an
#: interactive session): stages find this run's other outputs under it.
RUN_DIR_ENV = "HYPORT_RUN_DIR"
#: Beside the interactive results folder: one folder per recorded run.
HISTORY_DIR = "history"


def worst_verdict(verdicts: Iterable[str]) -> str:
    """FAIL > WARN > PASS; SKIP counts only when nothing else is there."""
    judged = [v for v in verdicts if v in SEVERITY]
    if not judged:
        return "SKIP"
    return max(judged, key=SEVERITY.__getitem__)


@dataclass(frozen=True)
class Check:
    """One judged fact about the host: a stable ``name`` (``"torch_npu_compat"``), its
    verdict and one line a user can act on."""

    name: str
    verdict: str
    reason: str

    def __post_init__(self):
        verdict = str(self.verdict).upper()
        if verdict not in VERDICTS:
            raise ValueError(f"Check {self.name!r}: verdict={self.verdict!r}, "
                             f"expected one of {', '.join(VERDICTS)}")
        object.__setattr__(self, "verdict", verdict)
        if "\n" in self.reason:
            object.__setattr__(self, "reason", " ".join(self.reason.split()))


@dataclass
class Provenance:
    """Where a figure came from; ``label`` says it in words (recorded with it)."""

    device: str  # npu | cuda | cpu
    emulated: bool = False  # computed by hyport's NPU emulation, not by an NPU
    label: str = field(init=False)

    def __post_init__(self):
        if self.emulated:
            self.label = f"NPU-emulated on {self.device.upper()} (not an NPU measurement)"
        else:
            self.label = {"npu": "NPU", "cuda": "CUDA GPU"}.get(self.device, "CPU (not an NPU measurement)")


@dataclass
class StageSummary:
    """What a stage's ``summarize(result)`` returns: the verdict, one line, a few figures,
    and where a stage says it, the reason for the verdict in a few words (``why``)."""

    verdict: str
    summary: str
    headline: dict[str, Any] = field(default_factory=dict)
    why: str = ""


@dataclass
class StageRecord(Generic[D]):
    """One stage's recorded result, ``<results>/<stage>.json``: written by :func:`record`,
    read back by :func:`read_record` (an odd verdict shows as recorded)."""

    stage: Optional[str] = None
    verdict: Optional[str] = None
    summary: str = ""
    headline: dict[str, Any] = field(default_factory=dict)
    provenance: Optional[Provenance] = None
    data: Any = None
    recorded_at: str = ""
    #: The stage's effective parameters (every field, not only the changed ones); {} when
    #: the caller recorded none.
    params: dict[str, Any] = field(default_factory=dict)
    #: The run's folder under ``history/`` ("" in a report run: its folder is the run).
    run_id: str = ""

    def figure(self, name: str) -> Any:
        """None where the record has no such headline figure."""
        return self.headline.get(name)


#: The file stage 04 writes into a checkpoint folder once every rank's part is saved (its world
#: size, storage and ranks), and stage 05 reads to tell a whole checkpoint from a part.
CHECKPOINT_MARKER = "hyport_checkpoint.json"


@dataclass
class TrainedWeights:
    """What stage 04 hands to stage 05, in its result's data (stages never import one
    another, so it lives here)."""

    #: The result (``<results>/<stage>.json``) that holds it, and the stage's name as
    #: parameters name it (``written_by``).
    STAGE: ClassVar[str] = "04_train"
    STAGE_NAME: ClassVar[str] = "train"

    final_dir: Optional[str] = None  # None: the training wrote no final weights
    last_checkpoint: Optional[str] = None  # the last complete one
    model_path: Optional[str] = None  # the model the training started from
    reason: Optional[str] = None  # why it ended as it did ("stopped by a signal after step 3 (...)")
    #: The job's hosts and the one that wrote this record: only node 0 holds the job's
    #: weights and checkpoints (a node > 0 never claims them).
    nnodes: int = 1
    node_rank: int = 0


def outputs_dir() -> Path:
    """``$HYPORT_OUTPUTS``, else ``outputs/`` of the current folder, never of the installed
    package's checkout (``hyport env`` run elsewhere writes nothing into the repository; a
    notebook, whose kernel runs in ``notebooks/``, writes into the ignored ``notebooks/outputs/``):
    where ``hyport report`` makes its runs and the interactive runs keep ``interactive/``."""
    env = os.environ.get(OUTPUTS_ENV)
    return Path(os.path.abspath(os.path.expanduser(env))) if env else Path.cwd() / "outputs"


def results_dir() -> Path:
    """``$HYPORT_RESULTS_DIR`` (a report run's own), else ``interactive/results`` of
    :func:`outputs_dir`."""
    env = os.environ.get(RESULTS_DIR_ENV)
    if env:
        return Path(env)
    return outputs_dir() / INTERACTIVE_DIR / "results"


def ensure_results_dir(directory: Optional[os.PathLike] = None) -> Path:
    """Created and writable, or a PermissionError naming it: checked by commands before any
    work, so that an hour's run never ends in a traceback about where to write its result."""
    folder = Path(directory) if directory else results_dir()
    try:
        ensure_writable(folder)
    except OSError as exc:
        via = f" (${RESULTS_DIR_ENV})" if os.environ.get(RESULTS_DIR_ENV) and not directory else ""
        raise PermissionError(exc.errno, f"the results folder {folder}{via} is not writable "
                                         f"({exc.strerror}); pass --no-record or fix it", str(folder)) from None
    return folder


def record(stage: Any, result: Any, *, params: Optional[StageParams] = None,
           directory: Optional[os.PathLike] = None) -> Path:
    """The one writer of a stage's record: ``stage`` is its module (``STAGE``, ``summarize``,
    and ``result_data`` where it records more than the result's fields)."""
    summary = stage.summarize(result)
    return write_record(StageRecord(stage.STAGE, summary.verdict, summary.summary, summary.headline,
                                    getattr(result, "provenance", None), recorded_data(stage, result),
                                    params=params.to_dict() if params is not None else {}), directory)


def recorded_data(stage: Any, result: Any) -> Any:
    """What ``stage`` records of ``result`` (and ``--json`` prints)."""
    return getattr(stage, "result_data", to_mapping)(result)


def write_record(record: StageRecord, directory: Optional[os.PathLike] = None) -> Path:
    """Atomically, stamped now. Into the default folder outside a report run, the record is
    first kept under :func:`history_dir` too. ValueError for no stage name or an odd verdict."""
    verdict = str(record.verdict).upper()
    if verdict not in STAGE_VERDICTS:
        raise ValueError(f"verdict={record.verdict!r}: expected one of {', '.join(STAGE_VERDICTS)}")
    if not record.stage:
        raise ValueError("stage must be a non-empty name such as '01_environment'")
    now = _dt.datetime.now(_dt.timezone.utc)
    keep = directory is None and not os.environ.get(RUN_DIR_ENV)
    stamped = replace(record, verdict=verdict, data=record.data if record.data is not None else {},
                      recorded_at=now.isoformat(timespec="seconds"), run_id=new_run_id(record.stage, now) if keep else "")
    # Through JSON first (default=str turns any object into text), then scrub every
    # string: no secret value survives in any field, escaped or not.
    written = scrub_obj(json.loads(json.dumps(to_mapping(stamped), default=str)))
    if keep:
        atomic_write_json(result_file(history_dir() / stamped.run_id, record.stage), written)
    return atomic_write_json(result_file(Path(directory) if directory else results_dir(), record.stage), written)


def new_run_id(stage: str, when: _dt.datetime) -> str:
    """``20250131-142501-04_train-3fa9c2``: sorts by time (local, the clock of the report
    run folders it is listed with), says the stage, and two runs recorded in the same
    second still get their own folders."""
    return f"{when.astimezone().strftime('%Y%m%d-%H%M%S')}-{stage}-{secrets.token_hex(3)}"


def history_dir() -> Path:
    return results_dir().parent / HISTORY_DIR


def result_file(directory: os.PathLike, stage: str) -> Path:
    return Path(directory) / f"{stage}.json"


class UnreadableResult(ValueError):
    """A result file that is there but holds no JSON object (half-written by a killed
    kernel, or not a result); ``reason``: the parser's message."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path.name}: {reason}")
        self.path, self.reason = path, reason


def read_result(path: os.PathLike) -> dict:
    """The one reader of result files: the object as written (an older or odd record still
    shows what it holds); FileNotFoundError when the stage recorded nothing,
    :class:`UnreadableResult` when the file holds no JSON object."""
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


def read_record(raw: Any, data_type: Optional[type[D]] = None) -> StageRecord[D]:
    """A result file's object as a :class:`StageRecord`, its ``data`` read as ``data_type``
    (as recorded when None); never raises for a shape problem."""
    read = from_mapping(StageRecord, raw)
    if data_type is not None:
        read.data = from_mapping(data_type, read.data)
    return read


def load_record(path: os.PathLike, data_type: Optional[type[D]] = None) -> StageRecord[D]:
    """:func:`read_record` of a result file, checked: a ValueError naming the file when it
    is missing, unreadable, or holds no stage name or an odd verdict."""
    path = Path(path)
    try:
        read = read_record(read_result(path), data_type)
    except (OSError, UnreadableResult) as exc:
        raise ValueError(f"{path}: not a valid hyport result ({getattr(exc, 'reason', exc)})") from exc
    if not read.stage or read.verdict not in STAGE_VERDICTS:
        raise ValueError(f"{path}: not a valid hyport result (stage={read.stage!r}, verdict={read.verdict!r})")
    return read


def fresh_folder_beside_results(kind: str, name: str = "") -> Path:
    """A new folder ``<results>/../<kind>/[<name>-]<stamp>-<pid>`` (not created): where a
    stage run outside a report keeps its logs or outputs, one folder per run."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    leaf = f"{name}-{stamp}-{os.getpid()}" if name else f"{stamp}-{os.getpid()}"
    return (results_dir().parent / kind / leaf).resolve()
