"""Start torchrun for a :class:`~hyport_lib.train.preflight.LaunchPlan` (under the output folder's
lock, as one child of :func:`hyport_lib.processes.run_child`) and watch it. The launcher never
touches a device: it reads the metrics file rank 0 appends.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.models.model_cache import default_cache_root
from hyport_lib.processes import (GUARDED_EXEC, Child, describe_exit, last_exception, log_size, read_log_tail, run_child,
                                  task_environ)
from hyport_lib.nodes.heartbeat import NodeExit
from hyport_lib.results import Provenance
from hyport_lib.train.output_dir import (PROBLEMS_FILE, RESULT_FILE, check_foreign, list_checkpoints,
                                         lock_output_dir, read_json_object, release_output_dir)
from hyport_lib.train.job_nodes import JobNodes, NodeStop, rendezvous_flags
from hyport_lib.train.packing import clear_first_batches
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import (TrainProgress, TrainResult, WorkerResult, final_weights, last_complete,
                                     read_metrics, summarize_metrics)
from hyport_lib.train.smoke_data import write_smoke_dataset
from hyport_lib.triage import Triage, cann_log_dir, diagnose, own_cann_log_env
from hyport_lib.utils.files import atomic_write_json, atomic_write_text, disk_full_error, ensure_writable
from hyport_lib.utils.scrub_log import scrub_log
from hyport_lib.utils.typed_records import from_mapping

#: The environment variable that hands every rank the plan (JSON, :meth:`LaunchPlan.worker_spec`).
SPEC_ENV = "HYPORT_TRAIN_SPEC"


def command(plan: LaunchPlan) -> list[str]:
    """torchrun, started with a guard that makes it die with its launcher (the workers, started
    by torchrun, start guards of their own)."""
    c = plan.params
    logs = Path(plan.output_dir) / "logs" / "ranks"
    if c.nnodes > 1:  # c10d on node 0's store with a join timeout; each node its own rank logs
        where, logs = rendezvous_flags(plan), logs / f"node{c.node_rank}"
    else:
        where = ["--node-rank", str(c.node_rank), "--master-addr", plan.master_addr,
                 "--master-port", str(plan.master_port)]
    return [sys.executable, "-c", GUARDED_EXEC, "torch.distributed.run", "--nnodes", str(c.nnodes),
            *where, "--nproc-per-node", str(plan.nproc_per_node),
            "--max-restarts", str(c.max_restarts), "--log-dir", str(logs),
            "--tee", "3", "-m", "hyport_lib.train.worker"]


def _environment(plan: LaunchPlan) -> dict[str, str]:
    extra = {
        SPEC_ENV: json.dumps(plan.worker_spec(), default=str),
        "TOKENIZERS_PARALLELISM": "false",
        # DeepSpeed's JIT-built ops are kept between runs instead of rebuilt.
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR")
        or str(default_cache_root() / "torch_extensions"),
        # Local folders only: nothing is downloaded at run time.
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    }
    if plan.device_kind == "npu":  # CANN's logs of this run beside its other logs (unless the user chose a folder)
        extra.update(own_cann_log_env(_own_cann_dir(Path(plan.output_dir))))
    if plan.device_kind == "cpu":
        extra["DS_ACCELERATOR"] = "cpu"  # skip DeepSpeed's accelerator probe
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        extra["OMP_NUM_THREADS"] = str(max(1, cores // plan.nproc_per_node))
    return task_environ(extra)


def launch(plan: LaunchPlan, on_progress: Optional[Callable[[TrainProgress], None]] = None,
           poll_interval_s: float = 0.5, kill_grace_s: float = 15.0) -> TrainResult:
    """Run the plan to the end (or the timeout), the output folder locked for this node. Raises
    OutputDirBusy, ForeignFiles (appeared since the plan) or OSError (the folder is not writable)."""
    out = Path(plan.output_dir)
    lock_output_dir(out, plan.params.node_rank)
    try:
        write_run_inputs(plan)
        return _launch(plan, on_progress, poll_interval_s, kill_grace_s)
    finally:
        release_output_dir(out)


def write_run_inputs(plan: LaunchPlan) -> None:
    out = Path(plan.output_dir)
    ensure_writable(out / "logs")
    # Checked again under the lock: the plan may be minutes old (a report plans every
    # stage first), and only hyport's own files may be overwritten.
    check_foreign(out, plan.params.overwrite_output_dir)
    clear_first_batches(out)  # every rank of this launch writes its own
    if plan.bundled_dataset:
        write_smoke_dataset(Path(plan.dataset_path).parent)
    problems = plan.dataset.get("problems") or []
    if problems:  # skipped records (a bad dataset without skip_bad_records never gets here)
        atomic_write_text(out / PROBLEMS_FILE, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in problems))
    atomic_write_json(plan.deepspeed_config_path, plan.deepspeed_json)


def _launch(plan: LaunchPlan, on_progress: Optional[Callable[[TrainProgress], None]],
            poll_interval_s: float, kill_grace_s: float) -> TrainResult:
    params = plan.params
    out = Path(plan.output_dir)
    (out / RESULT_FILE).unlink(missing_ok=True)  # never read an earlier run's result
    env = _environment(plan)
    nodes = JobNodes(plan) if params.nnodes > 1 else None
    started = time.monotonic()
    seen_size, records = 0, []  # the metrics file is read again only when it grew

    def notify(running: bool, stopped: bool = False) -> None:
        # At every poll, from the first second: torchrun takes seconds to start its ranks,
        # and the caller's display says so (and a Stop button is answered from here).
        nonlocal seen_size, records
        if on_progress is None:
            return
        size = log_size(plan.metrics_path) if params.node_rank == 0 else 0  # node 0's to show
        if size != seen_size:
            seen_size, records = size, read_metrics(plan.metrics_path)
        progress = TrainProgress(records, params.max_steps, time.monotonic() - started, running,
                                 ranks=plan.nproc_per_node, device=plan.device_kind, stopped=stopped,
                                 waiting_for=nodes.waiting_for() if nodes and running else [])
        try:
            on_progress(progress)
        except Exception as exc:  # a broken display must not abandon a running job
            warnings.warn(f"train: on_progress failed ({type(exc).__name__}: {exc}); the run goes on",
                          RuntimeWarning, stacklevel=2)

    def tick() -> None:
        notify(True)
        if nodes is not None:
            nodes.check()  # a NodeStop ends the watch: torchrun's group is stopped

    if nodes is not None:
        try:
            nodes.start()  # node 0: its token, then the store torchrun's agents join
        except NodeStop as stop:  # nothing started: the one line that says why
            notify(False)
            return collect(plan, None, time.monotonic() - started, False, stop=stop)
    try:
        notify(True)
        # Past train_timeout_s, and when interrupted: SIGTERM to torchrun (it stops its
        # workers), SIGKILL to its group after kill_grace_s.
        ended = run_child(command(plan), env=env, log_path=plan.log_path, timeout_s=params.train_timeout_s,
                          cwd=out, name="torchrun", environ=env, poll_interval_s=poll_interval_s,
                          kill_grace_s=kill_grace_s, stop_grace_s=kill_grace_s, on_tick=tick)
    except NodeStop as stop:
        _scrub_rank_logs(out, env)
        notify(False)
        return collect(plan, None, time.monotonic() - started, False, nodes=nodes, stop=stop)
    except BaseException as exc:
        _scrub_rank_logs(out, env)
        if isinstance(exc, KeyboardInterrupt):
            # Stopped: what finished (metrics, complete checkpoints) is kept, and the caller
            # finds it on the exception to show and record; the display says it stopped.
            exc.partial = collect(plan, None, time.monotonic() - started, False, stopped=True, nodes=nodes)
            notify(False, stopped=True)
        elif nodes is not None:
            nodes.link.stop()
        raise
    _scrub_rank_logs(out, env)
    notify(False)
    return collect(plan, ended.code, time.monotonic() - started, ended.timed_out, child=ended.child, nodes=nodes)


def _checkpoint_estimate(plan: LaunchPlan) -> int:
    """About what one checkpoint takes: the weights plus DeepSpeed's fp32 master copy and two Adam
    moments (12 bytes a parameter), as if the files held fp32: 4 x their size."""
    return 4 * sum(f.stat().st_size for f in Path(plan.model_path).glob("*.safetensors") if f.is_file())


def collect(plan: LaunchPlan, code: Optional[int], wall_s: float, timed_out: bool,
            stopped: bool = False, child: Optional[Child] = None, nodes: Optional[JobNodes] = None,
            stop: Optional[NodeStop] = None) -> TrainResult:
    """``child``: torchrun, whose memory evidence (its ranks' too) a SIGKILLed rank is judged by;
    ``nodes``: this node's part of a multi-node job (``stop``: why its launcher stopped torchrun).
    A node > 0 claims none of the job's metrics, checkpoints or weights: node 0's record has them."""
    out = Path(plan.output_dir)
    job_record = plan.params.node_rank == 0
    records = read_metrics(plan.metrics_path) if job_record else []
    written = read_json_object(out / RESULT_FILE)[0] if job_record else None
    worker = from_mapping(WorkerResult, written) if written else None
    tail = read_log_tail(plan.log_path, 30)
    if stop is not None:
        status, reason = "failed", stop.reason
    elif stopped and not job_record:  # this node reads no metrics: node 0 has them
        status, reason = "interrupted", "stopped by a signal (the job's steps are in node 0's record)"
    elif stopped:
        steps = [r.step for r in records]
        status, reason = "interrupted", (f"stopped by a signal after step {steps[-1]} (metrics and complete "
                                         "checkpoints kept)" if steps else "stopped by a signal before "
                                         "the first step")
    elif timed_out:
        status, reason = "timeout", f"stopped after train_timeout_s={plan.params.train_timeout_s:g}"
    elif code == 0 and ((worker is not None and worker.status == "ok") or not job_record):
        status, reason = "ok", None  # node rank > 0: rank 0 (elsewhere) writes the result
    else:
        status = "failed"
        cause = first_failure(plan.log_path, child)
        own = f"torchrun: {describe_exit(code, child)}" + (f"; first failure: {cause}" if cause else "")
        by_node = nodes.failure_reason(NodeExit(node_rank=plan.params.node_rank, status=status, exit_code=code,
                                                reason=own, log_path=str(plan.log_path), wall_s=round(wall_s, 3))) \
            if nodes is not None else None
        reason = by_node or own
        cause = None if by_node else cause
        others = nodes.other_failures() if nodes is not None and not by_node and job_record else ""
        if others:
            reason += f"; {others}"
        full = disk_full_error(RuntimeError(cause or ""), out, _checkpoint_estimate(plan))
        if full is not None:  # the rank logs on that disk may not even hold the error
            reason = f"{full.strerror}; {reason}"
    diagnosis = None
    # A node named as the cause (never joined, refused, silent): its ranks' logs hold only the echo.
    named_node = stop is not None or (status == "failed" and nodes is not None and reason and not reason.startswith("torchrun"))
    if status in ("failed", "timeout") and not named_node:
        # This launch's logs only (:func:`launch_logs`, CANN's too), with a margin for the
        # file system's clock granularity.
        started_at = time.time() - wall_s - 2
        diagnosis = Triage.from_dict(diagnose(
            launch_logs(out, plan.log_path, started_at),
            cann_dir=cann_log_dir(_cann_environ(out)) if plan.device_kind == "npu" else None,
            since=started_at, environ=_environment(plan)))
    checkpoints = list_checkpoints(out) if job_record else []
    rows, notes, host = [], [], ""
    if nodes is not None:
        note = nodes.ranks_note()
        notes = [note] if note else []
        # The node's own row says how it ended ("refused" by node 0's verdict; the job failed).
        own_status = stop.status if stop is not None else "interrupted" if stopped else status
        rows = nodes.finish(NodeExit(node_rank=plan.params.node_rank, status=own_status,
                                     exit_code=code, reason=reason, log_path=str(plan.log_path),
                                     wall_s=round(wall_s, 3)))
        host = nodes.card.host
    return TrainResult(
        status=status, exit_code=code, wall_s=round(wall_s, 3), reason=reason, plan=plan,
        summary=summarize_metrics(records, plan.params.throughput_warmup_steps), worker=worker,
        checkpoints=checkpoints, final_dir=final_weights(worker), last_checkpoint=last_complete(checkpoints),
        model_path=plan.model_path, metrics=records, log_tail=tail, diagnosis=diagnosis,
        provenance=Provenance(device=plan.device_kind), nodes=rows, host=host, node_notes=notes,
        nnodes=plan.params.nnodes, node_rank=plan.params.node_rank)


_RANK_LINE = re.compile(r"^\[(?:default)?(\d+)\]:(?:\[rank\d+\]:\s?)?(.*)$")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:.*\((SIG\w+)\))?")


def first_failure(log_path: os.PathLike, child: Optional[Child] = None) -> Optional[str]:
    """Which rank failed first, and why: ``rank R: SomeError: message`` or ``rank R: killed by SIGKILL``.
    torchrun's "Root Cause (first observed failure)" block names the rank and its exit code; that
    rank's last exception line (``--tee`` prefixes its lines with ``[defaultR]:``) says why. Other
    ranks usually fail as its echo ("Connection closed by peer"). Without the block, the first
    exception of any rank is taken. A rank killed by SIGKILL is judged by the memory evidence
    of ``child`` (torchrun, whose watch counts its ranks)."""
    try:
        lines = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    by_rank: dict[str, list[str]] = {}
    for line in lines:
        match = _RANK_LINE.match(line)
        if match:
            by_rank.setdefault(match.group(1), []).append(match.group(2))
    root_rank = root_exit = None
    if "Root Cause (first observed failure):" in "\n".join(lines):
        tail = lines[max(i for i, l in enumerate(lines) if "Root Cause (first observed failure)" in l):]
        for line in tail:
            rank, code = _ROOT_RANK.match(line), _ROOT_EXIT.match(line)
            if rank and root_rank is None:
                root_rank = rank.group(1)
            if code and root_exit is None:
                root_exit = (int(code.group(1)), code.group(2))
    if root_rank is not None:
        found = last_exception("\n".join(by_rank.get(root_rank, [])))
        if found and (root_exit is None or root_exit[0] >= 0):
            return f"rank {root_rank}: {found}"
        if root_exit is not None:
            return f"rank {root_rank}: {describe_exit(root_exit[0], child)}"
    for rank, rank_lines in by_rank.items():
        for line in rank_lines:
            found = last_exception(line)
            if found:
                return f"rank {rank}: {found}"
    found = last_exception("\n".join(lines))
    return f"torchrun: {found}" if found else None


def launch_logs(out: Path, log_path: os.PathLike, started_at: float) -> list[Path]:
    """The logs one launch into ``out`` wrote: torchrun's own (rewritten at each launch) and the
    rank logs modified since ``started_at`` (an earlier launch's must not be blamed)."""
    ranks = [p for p in sorted((out / "logs" / "ranks").rglob("*.log")) if _mtime(p) >= started_at]
    return [Path(log_path), *ranks]


def _cann_environ(out: Path) -> dict[str, str]:
    """The CANN log variable as the workers of a launch into ``out`` had it."""
    return {**os.environ, **own_cann_log_env(_own_cann_dir(out))}


def _own_cann_dir(out: Path) -> Path:
    return out / "logs" / "cann"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _scrub_rank_logs(out: Path, env: dict) -> None:
    for folder in (out / "logs" / "ranks", _own_cann_dir(out)):
        if folder.is_dir():
            for log in folder.rglob("*.log"):
                scrub_log(log, env)
