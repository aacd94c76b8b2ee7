"""The stage's child processes (reload, logits parity, ZeRO consolidation), launcher side.

Loading a model in the verifying process would prove little (modules already imported)
and could take the notebook's kernel down, so each task runs in a fresh interpreter
(:mod:`hyport_lib.processes`: own process group, configuration on a stdin lifeline, log
scrubbed, killed as a group past its timeout); :data:`TASK_FUNCTIONS` names what each runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.backend import detect_kind
from hyport_lib.processes import (describe_exit, last_exception, read_log_tail, read_task_result, run_child,
                                  task_command, task_environ)
from hyport_lib.results import fresh_folder_beside_results

KILL_GRACE_S = 2.0
POLL_S = 0.05
#: task -> the function its child runs (``module:function``, imported only there).
TASK_FUNCTIONS = {
    "reload": "hyport_lib.weights.reload:reload_in_child",
    "parity": "hyport_lib.weights.parity:parity_in_child",
    "zero": "hyport_lib.weights.zero_consolidate:consolidate_in_child",
}


@dataclass
class ChildOutcome:
    """How one child task ended: ``status`` ``ok`` (its result says so), ``failed`` or
    ``timeout``; ``result`` what it wrote (scrubbed, empty when nothing); ``reason`` one
    line when not ok."""

    task: str
    status: str
    result: dict
    reason: Optional[str]
    log_path: str
    log_tail: str
    exit_code: Optional[int]
    wall_s: float


@dataclass(kw_only=True)
class ChildRun:
    """What each task's result keeps of its child: why it did not succeed, its log, its time."""

    reason: Optional[str] = None
    log_path: Optional[str] = None
    log_tail: str = ""
    wall_s: Optional[float] = None

    @classmethod
    def from_outcome(cls, out: ChildOutcome, *args, taken: tuple[str, ...] = (), **kwargs):
        """``cls(*args, **kwargs)`` with the child's reason, log and time, and the ``taken``
        fields of its result when it succeeded (a field it left out keeps ``kwargs``')."""
        if out.status == "ok":
            kwargs.update({key: out.result[key] for key in taken if key in out.result})
        return cls(*args, reason=out.reason, log_path=out.log_path, log_tail=out.log_tail,
                   wall_s=out.wall_s, **kwargs)


def default_log_dir() -> Path:
    """A fresh folder beside the results: ``<results>/../weights_logs/<stamp>-<pid>``."""
    return fresh_folder_beside_results("weights_logs")


def child_env(task: str) -> dict[str, str]:
    """The child's environment (:func:`~hyport_lib.processes.task_environ`), DeepSpeed on the
    CPU here."""
    extra = {"TOKENIZERS_PARALLELISM": "false"}
    if task == "zero" and detect_kind() == "cpu" and "DS_ACCELERATOR" not in os.environ:
        # DeepSpeed otherwise probes for an accelerator it does not find and warns; the
        # consolidation itself only needs the CPU.
        extra["DS_ACCELERATOR"] = "cpu"
    return task_environ(extra)


def run_task(task: str, spec: dict, *, timeout_s: float, log_dir: Optional[os.PathLike] = None,
             name: Optional[str] = None) -> ChildOutcome:
    """Run ``task`` (a key of :data:`TASK_FUNCTIONS`) in a fresh child and wait at most
    ``timeout_s``. ``spec`` goes on stdin, never to a file; ``<name>.log`` and
    ``<name>.json`` go to ``log_dir`` (default :func:`default_log_dir`)."""
    log_dir = Path(log_dir) if log_dir else default_log_dir()
    log_dir.mkdir(parents=True, exist_ok=True)
    name = name or task
    log_path, result_path = log_dir / f"{name}.log", log_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)  # never read an earlier run's result
    cmd, payload = task_command(TASK_FUNCTIONS[task], spec, result_path, label=f"[hyport weights] {task}")
    ended = run_child(cmd, env=child_env(task), log_path=log_path, payload=payload,
                      timeout_s=float(timeout_s), name=name, poll_interval_s=POLL_S,
                      kill_grace_s=KILL_GRACE_S)
    return _outcome(task, log_path, result_path, ended.code, ended.timed_out, float(timeout_s),
                    time.monotonic() - ended.child.started)


def _outcome(task: str, log_path: Path, result_path: Path, code: Optional[int], timed_out: bool,
             timeout_s: float, wall_s: float) -> ChildOutcome:
    # The child scrubbed what it wrote (its environment holds this one's secrets: child_env).
    result = read_task_result(result_path)
    tail = read_log_tail(log_path, 12)
    if timed_out:
        status, reason = "timeout", f"no result after {timeout_s:g}s: the process group was killed"
    elif result.get("status") == "ok":
        status, reason = "ok", None
    elif result.get("status") == "failed":
        status, reason = "failed", f"{result.get('error_type', 'Error')}: {result.get('error', '')}"
    else:
        line = last_exception(tail)
        status, reason = "failed", f"{describe_exit(code)} without a result" + (f"; {line}" if line else "")
    reason = reason.splitlines()[0] if reason else None
    return ChildOutcome(task, status, result, reason, str(log_path), tail, code, round(wall_s, 3))
