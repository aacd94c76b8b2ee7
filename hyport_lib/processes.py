"""Child processes hyport starts, watches and stops: the inference workers, torchrun, and
every task run in a fresh interpreter (:func:`task_command`, :func:`task_main`).

Long work runs in fresh processes (fork + exec, never a fork of a process that touched
the device: "Cannot re-initialize NPU in forked subprocess"). Every launch gets:

* **Its own process group** (a new session), stopped as a whole; only groups hyport
  started are ever signalled.
* **A lifeline.** The child's stdin is a pipe whose write end only the launcher holds
  (first carrying a payload, the configuration, so secrets never touch the disk). The
  child starts a ``sh`` guard (:func:`start_guard`) that SIGKILLs its group at
  end-of-file, which the kernel delivers however the launcher ends (SIGKILL, ipykernel's
  ``os._exit``); descendants that inherit stdin (torchrun's workers) start their own.
  Not ``PR_SET_PDEATHSIG``: it kills the child alone, orphaning its children, fires when
  the spawning *thread* exits, and macOS lacks it; not a watchdog thread: a child stuck
  in a C call may hold the GIL.
* **No early reaping** (:func:`has_exited`), so a child's pid (= its group id) cannot
  pass to an unrelated process while hyport may still signal the group.
* **A watch to the end** (:class:`ChildGroup`, :func:`run_child`): deadlines enforced,
  logs scrubbed as children end, whatever still runs stopped when the caller is interrupted.
* **The memory evidence of its end**: the memory cgroup's counters before it starts and
  after it ends, its peak memory (the Pss of it and what it started, sampled; ``wait4``'s
  RSS when it is reaped), so that a SIGKILL is said as out of memory only where they show
  it (:func:`describe_exit`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import hyport_lib
from hyport_lib.backend import peak_rss_bytes
from hyport_lib.devices.out_of_memory import (KillDiagnosis, MemoryCounters, PeakRss, diagnose_kill, memory_counters,
                                              process_parents)
from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import child_environ, scrub_obj, scrub_text
from hyport_lib.utils.scrub_log import scrub_log

#: The guard: wait for end-of-file on stdin, then SIGKILL its own process group (the
#: child's). ``read`` fails at end-of-file; nothing but the payload is ever written.
GUARD_SCRIPT = "while read -r line; do :; done; kill -s KILL 0"
LOG_TAIL_LINES = 8
#: How often a watch samples its children's resident memory (a scan of /proc, about 1 ms; their
#: Pss, which costs more, less often: out_of_memory.PSS_COST_SPACING).
MEMORY_SAMPLE_S = 0.5
#: A task's result file bigger than this was not written by :func:`task_main` (the code the
#: task ran may have planted one).
MAX_TASK_RESULT_BYTES = 16 * 1024 * 1024
#: How :func:`read_task_result` begins the error of a result file it cannot read (planted,
#: cut short or too large: not what :func:`task_main` wrote).
UNREADABLE_RESULT = "unreadable result file"
#: What :func:`task_main` adds to the task's own result.
TASK_FIELDS = ("status", "pid", "peak_rss_bytes", "wall_s")
#: The child's command: ``-c``, as ``-m hyport_lib.processes`` would run this module twice
#: (as ``__main__``, then imported by the task).
_TASK_MAIN = "from hyport_lib.processes import task_main; task_main()"
#: :func:`exec_guarded`'s ``-c`` program, as :data:`_TASK_MAIN` is :func:`task_main`'s.
GUARDED_EXEC = "from hyport_lib.processes import exec_guarded; exec_guarded()"
_EXC_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Fault))(?::\s?(.*))?$")


@dataclass
class Child:
    """A process this module started, in its own process group (its pid is the group id)."""

    name: str  # for messages: "card 3", "torchrun"
    proc: subprocess.Popen
    started: float  # time.monotonic()
    deadline: Optional[float]  # monotonic time after which the launcher stops it
    log_path: Path
    lifeline: Optional[int] = None  # write end of its stdin (see the module docstring)
    unsent: bytes = b""  # what the pipe has not taken yet of the payload
    # once it ends, its log is cut to this many last bytes before it is scrubbed (None: kept
    # whole), so scrubbing never reads what a child printed in bulk
    log_tail_bytes: Optional[int] = None
    # the memory evidence of its end (see the module docstring): counters before and after
    memory_before: Optional[MemoryCounters] = None
    memory_after: Optional[MemoryCounters] = None
    peak_rss: Optional[PeakRss] = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill_diagnosis(self, code: Optional[int]) -> Optional[KillDiagnosis]:
        """Whether this child, or a process it started, ended by ``code`` (-9: SIGKILL) ran
        out of memory, with the figures; None when ``code`` is not a kill the OOM killer makes."""
        peak, measure = (self.peak_rss.bytes, self.peak_rss.measure) if self.peak_rss is not None else (0, "RSS")
        return diagnose_kill(code, self.memory_before, self.memory_after, peak or None, measure)


def start_child(cmd: Sequence[str], *, env: Mapping[str, str], log_path: os.PathLike,
                payload: bytes = b"", timeout_s: Optional[float] = None,
                cwd: Optional[os.PathLike] = None, name: str = "",
                log_tail_bytes: Optional[int] = None) -> Child:
    """Start ``cmd`` in a new session with a lifeline on its stdin, its output to
    ``log_path`` (truncated). ``payload`` goes to its stdin first (what the non-blocking
    pipe does not take now, later :func:`feed` calls write); ``timeout_s`` sets the
    ``deadline`` the caller enforces."""
    log_path = Path(log_path)
    memory_before = memory_counters()  # before it starts: a rise of oom_kill is its time
    read_end, lifeline = os.pipe()  # both non-inheritable: no other child gets the write end
    started = time.monotonic()
    try:
        with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=read_end, env=dict(env),
                cwd=str(cwd) if cwd else None,
                start_new_session=True,  # its own process group: killable as a whole
                close_fds=True)
    except BaseException:
        os.close(lifeline)
        raise
    finally:
        os.close(read_end)
    # Non-blocking: a child that never reads must not stall the launcher.
    os.set_blocking(lifeline, False)
    child = Child(name or Path(cmd[0]).name, proc, started,
                  started + float(timeout_s) if timeout_s else None, log_path,
                  lifeline=lifeline, unsent=payload, log_tail_bytes=log_tail_bytes,
                  memory_before=memory_before, peak_rss=PeakRss(proc.pid))
    feed(child)
    return child


def feed(child: Child) -> None:
    """Write what the pipe takes of the child's payload; the rest on a later call."""
    if not child.unsent or child.lifeline is None:
        return
    try:
        written = os.write(child.lifeline, child.unsent)
    except BlockingIOError:
        return  # pipe full: the child has not read yet
    except BrokenPipeError:
        child.unsent = b""  # it exited before reading; its exit status will say why
        return
    child.unsent = child.unsent[written:]


def cut_lifeline(child: Child) -> None:
    """Close the child's stdin; its guard then kills whatever is left of its group."""
    if child.lifeline is not None:
        os.close(child.lifeline)
        child.lifeline = None


def has_exited(proc: subprocess.Popen) -> bool:
    """Has the process exited? Does not reap it, so its pid (= its group id) stays ours."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):
        # macOS before Python 3.13: poll() reaps, so a later killpg of this group is
        # only as safe as the pid not being reused in the moments in between.
        return proc.poll() is not None
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True  # already reaped
    return info is not None


def kill_groups(children: Iterable[Child], grace_s: float) -> None:
    """SIGTERM, then after ``grace_s`` SIGKILL, the process groups of ``children`` (never
    reaped before, so no id has passed to another process); one grace period for all."""
    children = list(children)
    for child in children:
        try:
            os.killpg(child.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue  # the whole group is gone already
    end = time.monotonic() + grace_s
    while time.monotonic() < end and not all(has_exited(c.proc) for c in children):
        time.sleep(0.05)
    for child in children:
        try:
            os.killpg(child.proc.pid, signal.SIGKILL)  # also children the leader left behind
        except ProcessLookupError:
            continue  # every member already gone


def reap_leftovers(child: Child) -> None:
    """After the leader exited (not yet reaped): kill any process it left in its group."""
    if child.proc.returncode is not None:
        return  # already reaped: its pid may be reused, so its group is no longer ours
    try:
        os.killpg(child.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group held only the (exited) leader


def finish(child: Child, environ: Optional[Mapping[str, str]] = None) -> int:
    """Reap an exited (or killed) child, cut its lifeline, scrub its log (its tail, when
    :attr:`Child.log_tail_bytes` is set); its exit status. Its memory evidence is taken here:
    the counters after it, and its exact peak (:func:`_reap`)."""
    peak = _reap(child.proc)
    code = child.proc.wait()
    if child.peak_rss is not None and peak:
        child.peak_rss.record(peak, "RSS")
    child.memory_after = memory_counters()
    cut_lifeline(child)
    if child.log_tail_bytes is not None:
        _keep_tail(child.log_path, child.log_tail_bytes)
    scrub_log(child.log_path, environ)
    return code


def _reap(proc: subprocess.Popen) -> Optional[int]:
    """Reap ``proc`` with ``wait4``, which gives the peak RSS of that child alone (and of what
    it reaped: torchrun's ranks), exact to its last moment: ``ru_maxrss`` of ``RUSAGE_CHILDREN``
    is the largest of every child this process ever reaped. None when already reaped."""
    if proc.returncode is not None:
        return None
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return None  # reaped elsewhere: Popen.wait() says how it ended
    proc.returncode = os.waitstatus_to_exitcode(status)
    return int(usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024)


def log_size(path: os.PathLike | str) -> int:
    """The log's size in bytes; 0 when there is none (yet)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _keep_tail(log_path: Path, tail_bytes: int) -> None:
    if log_size(log_path) <= tail_bytes:
        return
    with open(log_path, "rb") as log:
        log.seek(-tail_bytes, os.SEEK_END)
        tail = log.read(tail_bytes)
    kept = log_path.with_name(log_path.name + ".tail")
    kept.write_bytes(tail)
    os.replace(kept, log_path)


class ChildGroup:
    """Children started together, watched to their ends, and never left behind: leaving the
    ``with`` block, however it ends, stops every child still running and scrubs its log. What
    the caller keeps of an interrupted run it reads inside the block, from :attr:`running`."""

    def __init__(self, *, environ: Optional[Mapping[str, str]] = None, stop_grace_s: float = 0.0):
        self.environ = environ
        self.stop_grace_s = stop_grace_s
        self.running: list[Child] = []

    def __enter__(self) -> "ChildGroup":
        return self

    def __exit__(self, *exc_info) -> bool:
        running, self.running = self.running, []
        if running:
            kill_groups(running, self.stop_grace_s)
            for child in running:
                finish(child, self.environ)
        return False

    def start(self, cmd: Sequence[str], **options) -> Child:
        """:func:`start_child` (same arguments); the child is watched by :meth:`wait`."""
        child = start_child(cmd, **options)
        self.running.append(child)
        return child

    def wait(self, on_exit: Callable[[Child, int, bool], None], *, poll_interval_s: float,
             kill_grace_s: float, on_tick: Optional[Callable[[], None]] = None) -> None:
        """Watch until every child has ended: leftovers of an exited one killed, those past
        their deadline killed together; each then finished (:func:`finish`) and passed to
        ``on_exit(child, exit_status, timed_out)``. ``on_tick`` runs between polls."""
        sampled = 0.0
        while self.running:
            for child in self.running:
                feed(child)
            if time.monotonic() - sampled >= MEMORY_SAMPLE_S:
                sampled, parents = time.monotonic(), process_parents()
                for child in self.running:
                    if child.peak_rss is not None:
                        child.peak_rss.sample(parents)
            now = time.monotonic()
            for child in [c for c in self.running if has_exited(c.proc)]:
                reap_leftovers(child)
                self._ended(child, on_exit, timed_out=False)
            expired = [c for c in self.running if c.deadline is not None and now >= c.deadline]
            if expired:
                kill_groups(expired, kill_grace_s)
                for child in expired:
                    self._ended(child, on_exit, timed_out=True)
            if self.running:
                if on_tick is not None:
                    on_tick()
                time.sleep(poll_interval_s)

    def _ended(self, child: Child, on_exit: Callable[[Child, int, bool], None], timed_out: bool) -> None:
        code = finish(child, self.environ)  # still in ``running`` until reaped: a stop here finishes it
        self.running.remove(child)
        on_exit(child, code, timed_out)


@dataclass
class Ended:
    """How one child :func:`run_child` watched ended."""

    child: Child
    code: int
    timed_out: bool


def run_child(cmd: Sequence[str], *, poll_interval_s: float, kill_grace_s: float,
              stop_grace_s: float = 0.0, environ: Optional[Mapping[str, str]] = None,
              on_tick: Optional[Callable[[], None]] = None, **options) -> Ended:
    """Start one child (:func:`start_child`'s ``options``) and watch it to its end
    (:meth:`ChildGroup.wait`); interrupted, it is stopped before the interrupt goes on."""
    ended: list[Ended] = []
    with ChildGroup(environ=environ, stop_grace_s=stop_grace_s) as group:
        group.start(cmd, **options)
        group.wait(lambda child, code, timed_out: ended.append(Ended(child, code, timed_out)),
                   poll_interval_s=poll_interval_s, kill_grace_s=kill_grace_s, on_tick=on_tick)
    return ended[0]


def read_log_tail(path: os.PathLike | str, lines: int = LOG_TAIL_LINES) -> str:
    """Last ``lines`` lines of a log as a terminal shows them (:func:`terminal_lines`: a
    progress bar's carriage-return redraws are one line, its last state), secrets
    scrubbed; empty when there is no log."""
    path = Path(path)
    if not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64 * 1024))
        text = fh.read().decode("utf-8", errors="replace")
    return scrub_text("\n".join(terminal_lines(text)[-lines:]))


def terminal_lines(text: str) -> list[str]:
    """``text``'s lines as a terminal leaves them: tqdm redraws its bar after a carriage
    return (``0%|`` ... ``100%|``), which ``str.splitlines`` would make one line each."""
    out = []
    for line in text.split("\n"):
        line = line.rstrip("\r")  # a CRLF ending is no redraw
        out.append(line[line.rfind("\r") + 1:])
    if out and not out[-1]:
        out.pop()  # the newline ending the last line
    return out


def last_exception(log_text: str) -> Optional[str]:
    """The last ``SomeError: message`` line of a log (a Python traceback's last line)."""
    for line in reversed(log_text.splitlines()):
        match = _EXC_LINE_RE.match(line.strip())
        if match:
            return line.strip()
    return None


def describe_exit(code: Optional[int], child: Optional[Child] = None) -> str:
    """An exit status in words: ``exit code 1`` or ``killed by signal SIGKILL (-9)``; a SIGKILL
    (or 137) of ``child``, or of a process it started, with its memory diagnosis
    (:meth:`Child.kill_diagnosis`): ``killed by signal SIGKILL (-9); out of memory: an OOM kill
    in this cgroup while it ran (oom_kill 0 -> 1); peak Pss 22.9 GiB of the 23.5 GiB limit``."""
    if code is None:
        return "still running"
    diagnosis = child.kill_diagnosis(code) if child is not None else None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        said = f"killed by signal {name} ({code})"
    else:
        said = f"exit code {code}"
    if diagnosis is not None:
        return f"{said}; {diagnosis}"
    if -code == signal.SIGKILL:
        return f"{said} (SIGKILL is also how the out-of-memory killer ends a process)"
    return said


# --------------------------------------------------------------------------- child tasks
#: Hugging Face's switch for transformers' bars ("Loading weights") and huggingface_hub's.
HF_PROGRESS_BARS_OFF = {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}
#: A child's output goes to its log, never to a terminal: no progress bars there (a bar
#: redraws itself after a carriage return, every redraw a line in the log): Hugging Face's,
#: and tqdm's default for any other library's bar.
QUIET_PROGRESS_ENV = {**HF_PROGRESS_BARS_OFF, "TQDM_DISABLE": "1"}


def task_environ(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """A child's environment: this one (:func:`~hyport_lib.utils.redact.child_environ`),
    unbuffered, with no progress bars (:data:`QUIET_PROGRESS_ENV`), hyport importable even
    where it is not installed, then ``extra``."""
    root = str(Path(hyport_lib.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return child_environ({"PYTHONUNBUFFERED": "1", **QUIET_PROGRESS_ENV, "PYTHONPATH": path, **(extra or {})})


def task_command(target: str, spec: dict, result_path: os.PathLike | str, *, label: str,
                 teardown: bool = False, python_flags: Sequence[str] = ()) -> tuple[list[str], bytes]:
    """The command that runs ``target`` (``"module:function"``, imported only in the child)
    through :func:`task_main`, and the payload for its lifeline: ``spec`` as one JSON line
    (never a file: it may hold secrets). ``label`` starts the child's log lines;
    ``teardown``: exit normally, so that a child holding an accelerator releases it in order."""
    cmd = [sys.executable, *python_flags, "-c", _TASK_MAIN, target, "--result", str(result_path),
           "--label", label]
    return cmd + ["--teardown"] * teardown, json.dumps(spec, default=str).encode() + b"\n"


def read_task_result(path: os.PathLike | str) -> dict:
    """What :func:`task_main` wrote (scrubbed there): empty when it wrote nothing, a failed
    result naming the file when that is unreadable or no JSON object."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        result = json.loads(read_text(path, MAX_TASK_RESULT_BYTES))
        if not isinstance(result, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        said = str(exc) if isinstance(exc, UnreadableFile) else f"{path}: {exc}"  # the former names the file
        return {"status": "failed", "error_type": type(exc).__name__, "error": f"{UNREADABLE_RESULT} {said}"}
    return result


def task_main(argv: Optional[Sequence[str]] = None) -> None:
    """The child side of :func:`task_command`: the spec is stdin's first line (the rest is the
    lifeline of :func:`start_guard`); every failure becomes a ``failed`` result; exit status 0 or 1."""
    parser = argparse.ArgumentParser(prog="hyport task", description="One task in a fresh interpreter.")
    parser.add_argument("target", help="module:function, called with the spec")
    parser.add_argument("--result", required=True, help="where to write the result JSON")
    parser.add_argument("--label", required=True, help="what starts the log's lines")
    parser.add_argument("--teardown", action="store_true", help="exit normally")
    args = parser.parse_args(argv)
    started = time.monotonic()
    line = sys.stdin.buffer.readline()
    guard = start_guard()
    visible = {k: v for k, v in os.environ.items() if k.endswith("VISIBLE_DEVICES")}
    print(scrub_text(f"{args.label} pid {os.getpid()} visible {visible or '-'}"
                     + (f" guard pid {guard}" if guard else "")), flush=True)
    try:
        try:
            spec = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"the task's spec on stdin is not JSON ({exc})") from None
        module, _, function = args.target.partition(":")
        result = {"status": "ok", **getattr(importlib.import_module(module), function)(spec)}
        code = 0
    except Exception as exc:  # the process boundary: every failure becomes a result
        sys.stderr.write(scrub_text(traceback.format_exc()))
        sys.stderr.flush()
        error = (scrub_text(str(exc)).strip().splitlines() or [""])[0][:2000]
        result, code = {"status": "failed", "error_type": type(exc).__name__, "error": error}, 1
    result.update(pid=os.getpid(), peak_rss_bytes=peak_rss_bytes(),
                  wall_s=round(time.monotonic() - started, 3))
    atomic_write_json(args.result, scrub_obj(result))
    print(scrub_text(f"{args.label} {result['status']} in {result['wall_s']:.1f}s"), flush=True)
    if not args.teardown:
        exit_without_teardown(code)
    sys.exit(code)


def start_guard(log=None) -> Optional[int]:
    """In a child: start the stdin guard (see the module docstring); its pid. None (and a
    note on ``log``) when this process does not lead its group: that group is not ours."""
    out = log or sys.stdout
    if not hasattr(os, "getpgrp") or os.getpgrp() != os.getpid():
        print("[hyport] not a process-group leader: no guard, this process will not "
              "follow its launcher's exit", file=out, flush=True)
        return None
    guard = subprocess.Popen(["/bin/sh", "-c", GUARD_SCRIPT], stdin=sys.stdin.fileno(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    return guard.pid


def exec_guarded() -> None:
    """``python -c GUARDED_EXEC MODULE ARGS...``: start the guard in this process group, then
    *become* ``python -m MODULE ARGS...`` (``exec``: same pid, same group), so that a child that
    starts no guard of its own (torchrun) dies with its launcher."""
    start_guard(log=sys.stderr)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", *sys.argv[1:]])


def exit_without_teardown(code: int) -> None:
    """Leave a worker process at once, its result already on disk: with torch and a model
    loaded, the orderly teardown wastes about a second. Workers holding an accelerator
    exit normally instead, so the runtime's exit handlers release the card in order."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
