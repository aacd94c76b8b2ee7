"""Run the stage notebooks with papermill and assemble ``outputs/<run-id>/`` (its files:
README, "What a report contains"; what an interruption leaves: README, "Interruption, exactly").

``run.json`` and the index are rewritten whenever a stage starts and ends, so any end of
the run leaves a true picture; a second stop signal does not cut that write short. Whatever
ends the run, the folder is left with neither ``.partial/`` nor ``.runner.lock``; a SIGKILL
leaves them to the next run's :func:`clean_run`, once :func:`runner_alive` proves it dead.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

from hyport_lib.report.blog import write_blog_drafts
from hyport_lib.report.bundle import write_bundle
from hyport_lib.report.index import write_index
from hyport_lib.report.nodes import (MAX_RUN_JSON_BYTES, NODES_DIR, NodePlace, node_folder, node_place,
                                     runs_on_every_node, skipped_here)
from hyport_lib.report.run import (NOT_RUN, PENDING, RESULTS_DIR, RUNNING, ReportRun, StageOutcome, load_views,
                                   new_run_dir)
from hyport_lib.report.run_parameters import (check_before_running, load_profile, resolve_parameters, resolve_profile,
                                              safe_parameters)
from hyport_lib.report.stage_run import FAILED_SUMMARY, PARTIAL_DIR, run_stage, scrub_file, sweep_partial
from hyport_lib.results import INTERRUPTED, SKIP, StageRecord, outputs_dir, write_record
from hyport_lib.stages import discover_stages, select_stages
from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.files import atomic_write_json, ensure_writable
from hyport_lib.utils.imports import collect_versions
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.signals import shielded
from hyport_lib.utils.wording import counted

#: Per-cell limit; papermill would otherwise wait forever on a hung cell.
DEFAULT_CELL_TIMEOUT_S = 1800


def check_output_root(output_root: Path) -> Path:
    """Created and writable, or a one-line error naming it."""
    output_root = Path(output_root).resolve()
    if output_root.exists() and not output_root.is_dir():
        raise NotADirectoryError(20, f"--output-dir {str(output_root)!r} is a file, not a folder",
                                 str(output_root))
    try:
        ensure_writable(output_root)
    except OSError as exc:
        raise PermissionError(exc.errno, f"--output-dir {str(output_root)!r} is not writable "
                                         f"({exc.strerror})", str(output_root)) from None
    return output_root


def check_kernel(name: Optional[str]) -> None:
    """``--kernel``: a Jupyter kernel that is installed, checked before any stage runs."""
    if not name:
        return
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        manager.get_kernel_spec(name)
    except NoSuchKernel:
        installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise ValueError(f"--kernel {name!r}: no such Jupyter kernel (installed: {installed})") from None


def run_report(*, profile: Optional[str] = None, overrides: Optional[dict] = None,
               only: Optional[Iterable[str]] = None, output_root: Optional[Path] = None,
               notebooks_dir: Optional[Path] = None, cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
               kernel_name: Optional[str] = None, show_inputs: bool = True,
               progress: Optional[Callable[[str], None]] = None,
               progress_bar: bool = False, allow_unknown_parameters: bool = False,
               run_dir: Optional[Path] = None) -> ReportRun:
    """``run_dir``: the run folder itself (``--run-dir``), e.g. one on shared storage that
    every node of a multi-node run names; default: a new folder under ``output_root``."""
    if run_dir is not None and output_root is not None:
        raise ValueError("--run-dir names the run folder itself: leave --output-dir out")
    say = progress or _say
    profile_path = resolve_profile(profile)
    all_stages = discover_stages(notebooks_dir)
    if not all_stages:
        raise FileNotFoundError(f"no stage notebooks (NN_name.ipynb) in {notebooks_dir or 'notebooks/'}")
    stages = select_stages(all_stages, only)
    from_profile = load_profile(profile_path)
    params = resolve_parameters(
        from_profile, overrides or {}, all_stages,
        profile_name=f"profile {profile_path.name}" if profile_path else "profile",
        allow_unknown=allow_unknown_parameters)
    place = node_place(params.merged, run_dir_given=run_dir is not None)
    here = [s for s in stages if runs_here(place, params.declared[s.id])]
    notes = check_before_running(params, here) if here else None
    for problem in notes.host if notes else ():
        # the host, not a value: the stage meets it when it runs, and 01 explains it
        say(f"note: {problem} (the stage will fail on it; the others run)")
    for check in notes.left_out if notes else ():
        say(f"note: {check}; the rest of the stage runs")
    check_kernel(kernel_name)
    lock = None
    if run_dir is None:
        output_root = check_output_root(Path(output_root) if output_root else outputs_dir())
        clean_runs(output_root, say)
        run_id, run_dir = new_run_dir(output_root)
    else:  # a folder others may share: locked before anything is looked at or written there
        run_id, run_dir, lock = open_node_folder(Path(run_dir), place)
    versions = collect_versions()
    try:  # from the folder's first moment: a stop at any point below leaves no lock behind
        lock = lock or hold_run_lock(run_dir)  # held until this function returns: the run is alive
        run = ReportRun(
            run_id=run_id, run_dir=run_dir, profile=str(profile_path) if profile_path else None,
            parameters=safe_parameters(params.merged),
            stages=[StageOutcome(stage=s.id, verdict=PENDING, parameters=safe_parameters(params.effective(s)))
                    for s in stages],
            versions=versions, started=_now(), unused_parameters=params.unused,
            pid=os.getpid(), pid_started=process_start_time(os.getpid()) or 0.0,
            host=socket.gethostname(), left_out=[s.id for s in all_stages if s not in stages],
            parameter_sources={k: "-p" if k in (overrides or {}) else "profile" for k in params.merged
                               if k in (overrides or {}) or k in from_profile},
            nnodes=place.nnodes, node_rank=place.node_rank)
        return _run_stages(run, stages, params, say, place, cell_timeout_s=cell_timeout_s,
                           kernel_name=kernel_name, show_inputs=show_inputs,
                           progress_bar=progress_bar)
    finally:
        with shielded():
            release_run_folder(run_dir, lock)


def runs_here(place: NodePlace, declared: dict) -> bool:
    """Node 0 runs every selected stage; another node, those that run on every node."""
    return place.node_rank == 0 or runs_on_every_node(declared)


def open_node_folder(run_root: Path, place: NodePlace):
    """``--run-dir``: this node's folder in it (node 0: the run folder; node K:
    ``nodes/node<K>``), created, locked for this node alone, and holding no earlier run of
    it; ``(run id, folder, lock)``. A one-line error naming ``--run-dir`` otherwise."""
    run_root = Path(run_root).expanduser().resolve()
    if run_root.exists() and not run_root.is_dir():
        raise NotADirectoryError(20, f"--run-dir {str(run_root)!r} is a file, not a folder", str(run_root))
    folder = node_folder(run_root, place.node_rank)
    who = f"node {place.node_rank}" if place.multi_node else "a report"
    try:
        ensure_writable(folder)
    except OSError as exc:
        raise PermissionError(exc.errno, f"--run-dir {str(run_root)!r}: {folder} is not writable "
                                         f"({exc.strerror})", str(folder)) from None
    try:
        lock = hold_run_lock(folder)
    except BlockingIOError:
        raise RuntimeError(f"--run-dir {str(run_root)!r}: {who} is already running there "
                           f"(its lock {folder / LOCK_FILE} is held)") from None
    earlier = folder / "run.json"
    if earlier.exists():
        (folder / LOCK_FILE).unlink(missing_ok=True)  # held by this process: ours, as in release_run_folder
        lock.close()
        raise ValueError(f"--run-dir {str(run_root)!r} already holds {who}'s run ({earlier}); give every node "
                         "a new folder for a new run")
    return run_root.name, folder, lock


def _skip_on_this_node(run: ReportRun, index: int, stage, place: NodePlace) -> StageOutcome:
    """A stage that runs on node 0 only, recorded SKIP in this node's results."""
    outcome = run.stages[index]
    outcome.verdict, outcome.summary = SKIP, skipped_here(place)
    write_record(StageRecord(stage.id, SKIP, outcome.summary), Path(run.run_dir) / RESULTS_DIR)
    return outcome


def _run_stages(run: ReportRun, stages, params, say, place: NodePlace = NodePlace(),
                **stage_options) -> ReportRun:
    run_dir = run.run_dir
    write_run_files(run)
    where = f" (node {place.node_rank} of {place.nnodes})" if place.multi_node else ""
    say(f"hyport report {run.run_id}{where}: {counted(len(stages), 'stage')} -> {run_dir}")
    current = None
    try:
        for i, stage in enumerate(stages, 1):
            current = i - 1
            run.stages[current].verdict = RUNNING
            with shielded():
                write_run_files(run, blog=False)
            if not runs_here(place, params.declared[stage.id]):
                outcome = _skip_on_this_node(run, current, stage, place)
            else:
                outcome = run_stage(stage, run_dir, params.for_stage(stage), outcome=run.stages[current],
                                    job_dir=run.root_dir, **stage_options)
            if outcome.interrupted:
                outcome.verdict = INTERRUPTED
                if outcome.summary == FAILED_SUMMARY:
                    outcome.summary = "stage interrupted"
            run.stages[current] = outcome
            current = None
            # One line per stage: a long error (a cell timeout quotes the cell) is in the
            # stage's log and the index; the terminal gets its first line.
            said = outcome.error or outcome.summary
            detail = f" - {(said.strip().splitlines() or [''])[0][:300]}" if said else ""
            say(f"[{i}/{len(stages)}] {stage.id} {outcome.verdict} ({outcome.duration_s:.1f}s){detail}")
            if outcome.interrupted:
                raise KeyboardInterrupt
            with shielded():
                write_run_files(run)
    except BaseException:
        # Stopped (or a bug): the stage under way is INTERRUPTED, the rest NOT RUN, and
        # the files say so; a further stop signal waits until they are written.
        with shielded():
            sweep_partial(run_dir)  # a stop signal that came between a stage's end and its collection
            if current is not None:
                run.stages[current].verdict = INTERRUPTED
                run.stages[current].error = run.stages[current].error or "the run was stopped during this stage"
            for outcome in run.stages:
                if outcome.verdict == PENDING:
                    outcome.verdict = NOT_RUN
            run.status, run.finished = "interrupted", _now()
            write_run_files(run)
        say(f"interrupted; partial report: {run_dir / 'index.html'}")
        raise
    run.status, run.finished = "finished", _now()
    with shielded():
        write_run_files(run)
    say(f"index: {run_dir / 'index.html'}")
    return run


def write_run_files(run: ReportRun, blog: bool = True) -> None:
    """``index.html`` and ``run.json`` from the run's state now; with ``blog``, also the
    drafts, their figures and ``report.html`` (unchanged when a stage starts; node 0's
    only). Every recorded result is read once and shared by every file."""
    views = load_views(run)
    write_index(run, views)
    atomic_write_json(run.run_dir / "run.json", scrub_obj(run.to_dict()))
    if blog and run.node_rank == 0:  # node 0 owns the drafts and report.html
        write_blog_drafts(run, views)
        write_bundle(run, views)


_TERMINAL = {"gone": False}


def _say(message: str) -> None:
    # A terminal that went away (`| head`, a closed ssh session) must not stop the run:
    # the files say everything the terminal would have.
    if _TERMINAL["gone"]:
        return
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        _TERMINAL["gone"] = True


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


# --------------------------------------------------------------------------- the lock, and runs that were killed
_TEXT_SUFFIXES = {".ipynb", ".html", ".json", ".jsonl", ".log", ".md", ".txt", ".yaml"}


def process_start_time(pid: int) -> Optional[float]:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


LOCK_FILE = ".runner.lock"


def hold_run_lock(run_dir: Path):
    """Locked for as long as the returned file stays open (the runner's life): a pid alone
    proves nothing across containers (another pid namespace sharing the output volume)."""
    import fcntl

    handle = open(Path(run_dir) / LOCK_FILE, "w")
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    return handle


def release_run_folder(run_dir: Path, lock) -> list[str]:
    """The last thing a run does, whatever ended it (the caller holds stop signals back):
    a notebook still in ``.partial/`` is scrubbed into ``notebooks/`` (a stop came between
    a stage's end and its collection), then the lock file goes, then the lock. ``lock``
    None: a stop came before it was taken. A folder left empty is removed: nothing to clean."""
    run_dir = Path(run_dir)
    try:
        swept = sweep_partial(run_dir)
        with contextlib.suppress(FileNotFoundError):
            (run_dir / PARTIAL_DIR).rmdir()
    finally:
        # Unlinked while still held: a runner_alive() of another process that looks now
        # finds no lock file and asks the pid, which is still this live process.
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
        if lock is not None:
            lock.close()
        with contextlib.suppress(OSError):  # only when empty
            run_dir.rmdir()
    return swept


def runner_alive(run_dir: Path, data: dict) -> bool:
    """Unless proven dead: its lock is free, it ran on this host, and its pid is gone or
    belongs to a newer process."""
    import fcntl

    if data.get("host") and data.get("host") != socket.gethostname():
        return True  # another machine: its lock may not be visible from here
    try:
        # read-only: opening must never create the lock file of a run that just removed it
        handle = open(Path(run_dir) / LOCK_FILE)
    except FileNotFoundError:
        handle = None
    if handle is not None:
        with handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True  # held: alive (in this namespace or another)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    pid, started = int(data.get("pid") or 0), float(data.get("pid_started") or 0)
    if pid <= 0:
        return False
    now_started = process_start_time(pid)
    return now_started is not None and abs(now_started - started) < 1.0


def needs_cleaning(run_dir: Path, data: dict) -> bool:
    """Still ``running`` (killed, if its runner is dead), or a partial notebook left behind
    (stopped in the instant before it could scrub it)."""
    partial = Path(run_dir) / PARTIAL_DIR
    return data.get("status") == "running" or (partial.is_dir() and any(partial.iterdir()))


def clean_runs(output_root: Path, say: Optional[Callable[[str], None]] = None) -> list[Path]:
    """Clean every run under ``output_root`` that was killed; their folders."""
    cleaned = []
    if not Path(output_root).is_dir():
        return cleaned
    # a node > 0 of a multi-node run keeps its own run.json in <run>/nodes/node<K>/
    found = [*Path(output_root).glob("*/run.json"), *Path(output_root).glob(f"*/{NODES_DIR}/node*/run.json")]
    for run_json in sorted(found):
        try:
            data = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if not needs_cleaning(run_json.parent, data) or runner_alive(run_json.parent, data):
            continue
        clean_run(run_json.parent, data)
        cleaned.append(run_json.parent)
        if say:
            say(f"cleaned a run that was killed: {run_json.parent.name}")
    return cleaned


def _live_node_folders(run_dir: Path) -> list[Path]:
    """The folders ``<run>/nodes/node<K>/`` (a run on several hosts) whose runner may still be
    alive: its lock held, another host's, or its process there (:func:`runner_alive` on
    its ``run.json``; a node that wrote none yet is judged by its lock alone)."""
    live = []
    for folder in sorted(Path(run_dir).glob(f"{NODES_DIR}/node*")):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            data = json.loads(read_text(folder / "run.json", MAX_RUN_JSON_BYTES, folder=run_dir))
        except UnreadableFile:
            data = {}
        except ValueError:  # half-written: a runner writing it now
            live.append(folder)
            continue
        if runner_alive(folder, data if isinstance(data, dict) else {}):
            live.append(folder)
    return live


def clean_run(run_dir: Path, data: dict) -> None:
    shutil.rmtree(run_dir / PARTIAL_DIR, ignore_errors=True)
    (run_dir / LOCK_FILE).unlink(missing_ok=True)  # its runner is proven dead: nothing holds it
    live = _live_node_folders(run_dir)
    for path in run_dir.rglob("*"):
        if any(folder in path.parents for folder in live):
            continue  # another node's part, which that node may be writing now
        if path.is_file() and path.suffix in _TEXT_SUFFIXES and path.name != "run.json":
            scrub_file(path)
    when = _now()
    run = ReportRun.from_dict({**data, "run_dir": str(run_dir)})
    if run.status != "running":  # stopped, not killed: only its partial notebook was left
        run.notes.append(f"a partial notebook was removed and the files scrubbed at {when}")
        write_run_files(run)
        return
    for stage in run.stages:
        if stage.verdict == RUNNING:
            stage.verdict = INTERRUPTED
            stage.error = (f"the run was killed during this stage (found at {when}); its "
                           "partial notebook was removed")
        elif stage.verdict == PENDING:
            stage.verdict = NOT_RUN
    run.status = "killed"
    run.notes.append(f"the runner died without finishing (found and cleaned at {when})")
    write_run_files(run)
