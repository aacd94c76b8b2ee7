"""Runs that were killed: found, made truthful and cleaned, by the next run or ``--clean``.

A killed run's ``run.json`` still says ``RUNNING`` and its notebook sits unscrubbed in
``.partial/``. Cleaning removes the partial notebooks and the dead runner's lock file,
scrubs every text file of the run of the secret values set now, marks ``RUNNING`` as ``INTERRUPTED``, ``PENDING`` as
``NOT RUN`` and the run ``killed``, and rewrites ``run.json`` and ``index.html``. Only a
run proven dead is touched (:func:`runner_alive`); another host's runs are left alone.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import shutil
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.report.run import NOT_RUN, PENDING, RUNNING, ReportRun
from hyport_lib.report.run_files import write_run_files
from hyport_lib.report.stage_run import PARTIAL_DIR, scrub_file, sweep_partial
from hyport_lib.results import INTERRUPTED

_TEXT_SUFFIXES = {".ipynb", ".html", ".json", ".jsonl", ".log", ".md", ".txt", ".yaml"}


def process_start_time(pid: int) -> Optional[float]:
    """When process ``pid`` started (None when there is no such process)."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


LOCK_FILE = ".runner.lock"


def hold_run_lock(run_dir: Path):
    """Lock the run folder for as long as the returned file stays open (the runner's life).

    A pid alone proves nothing across containers (another pid namespace sharing the
    output volume): a runner that holds this lock is alive, wherever it runs.
    """
    import fcntl

    handle = open(Path(run_dir) / LOCK_FILE, "w")
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    return handle


def release_run_folder(run_dir: Path, lock) -> list[str]:
    """The last thing a run does, whatever ended it (a normal end, a failed stage, a stop
    signal; the caller holds stop signals back meanwhile): a notebook still in ``.partial/``
    is scrubbed into ``notebooks/`` and ``.partial/`` removed, then the lock file, then the
    lock released. The folder then holds only the run's own files. Returns the notebooks
    swept (none unless a stop came between a stage's end and its collection). ``lock``
    None: a stop came before the lock was taken. A folder left empty (stopped before the
    run wrote anything) is removed: no run to clean or to list."""
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
    """Could the run's runner still be running? Only a run proven dead is cleaned: its lock
    is free, it ran on this host, and its pid is gone or belongs to a newer process."""
    import fcntl
    import socket

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
    """The run says it is still running (if its runner is dead, it was killed), or it left
    a partial notebook behind (stopped in the instant before it could scrub it)."""
    partial = Path(run_dir) / PARTIAL_DIR
    return data.get("status") == "running" or (partial.is_dir() and any(partial.iterdir()))


def clean_runs(output_root: Path, say: Optional[Callable[[str], None]] = None) -> list[Path]:
    """Clean every dead, unfinished run under ``output_root``; returns their folders."""
    cleaned = []
    if not Path(output_root).is_dir():
        return cleaned
    for run_json in sorted(Path(output_root).glob("*/run.json")):
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


def clean_run(run_dir: Path, data: dict) -> None:
    """Clean one dead run (see the module docstring)."""
    shutil.rmtree(run_dir / PARTIAL_DIR, ignore_errors=True)
    (run_dir / LOCK_FILE).unlink(missing_ok=True)  # its runner is proven dead: nothing holds it
    for path in run_dir.rglob("*"):
        if path.is_file() and path.suffix in _TEXT_SUFFIXES and path.name != "run.json":
            scrub_file(path)
    when = _dt.datetime.now().isoformat(timespec="seconds")
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
