"""The proof of a port runs the user's code (whatever it does at import): only when asked
(``hyport port --proof``, stage 02's ``port_proof``, as ``trust_remote_code``), and never in
hyport's process. Without consent :func:`proof_not_run` names the files it would import.
How the child runs: docs/porting.md, "The proof"; it records its current step in a file,
so a child that dies without a result is a FAIL naming the step.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.scan.rules import GENERATED_MODULE
from hyport_lib.proof.port_record import PortProof, ProofCase, model_files
from hyport_lib.processes import (MAX_TASK_RESULT_BYTES, TASK_FIELDS, UNREADABLE_RESULT, ChildGroup, Ended,
                                  describe_exit, last_exception, log_size, read_log_tail, read_task_result,
                                  task_command, task_environ)
from hyport_lib.results import FAIL, SKIP
from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import scrub_secret_shapes, scrub_text

#: The proof's time limit when none is given: the three vendored models prove in 5-40 s
#: on 2 CPU cores; ten minutes leaves room for a big config on a slow host.
DEFAULT_TIMEOUT_S = 600.0
KILL_GRACE_S = 2.0
POLL_S = 0.05
#: The step of a child that died before the proof told its first one.
STARTING = "the child's start (before the proof began)"
#: The most the child may print: past it its process group is killed (a model printing
#: in a loop would fill the disk before the time limit), and only the log's tail is kept.
MAX_LOG_BYTES = 64 * 1024 * 1024
LOG_TAIL_BYTES = 64 * 1024
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def proof_not_run(src: os.PathLike | str, dst: os.PathLike | str, allow: str) -> PortProof:
    """The record of a proof not asked for: a SKIP whose ``error`` is one line naming the
    files it would import first (each imports what it needs) and ``allow``, how to ask for
    it (``"add --proof"``)."""
    src, dst = Path(src), Path(dst)
    only = src.name if src.is_file() else None
    original = [p.name for p in model_files(src.parent if only else src, only)]
    ported = [p.name for p in model_files(dst, only)]
    ported += [p.relative_to(dst).as_posix() for p in sorted(dst.rglob(f"{GENERATED_MODULE}.py"))]
    return PortProof(verdict=SKIP, error=(
        f"not run: the proof imports and runs your model code (SRC: {', '.join(original) or 'no file'}; "
        f"DST: {', '.join(ported) or 'no file'}); {allow} to run it in a child process"))


def scrub(text: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """``text`` without secret values of the environment nor secrets by their shape, nor
    terminal escapes or control characters (shown as ``\\xNN``). NUL characters are
    dropped first: a secret printed in UTF-16 is its letters between NULs."""
    return printable(scrub_secret_shapes(scrub_text(text.replace("\x00", ""), environ)), keep="\t\n")


def _scrub_strings(item, environ):
    if isinstance(item, str):
        return scrub(item, environ)
    if isinstance(item, dict):
        return {key: _scrub_strings(value, environ) for key, value in item.items()}
    if isinstance(item, list):
        return [_scrub_strings(value, environ) for value in item]
    return item


def proof_from_dict(data: dict, environ: Optional[Mapping[str, str]] = None) -> PortProof:
    """A :class:`PortProof` from the child's JSON, every string in it scrubbed; ValueError
    naming the field when ``data`` is no proof record."""
    data = _scrub_strings(data, environ)
    fields = set(PortProof.__dataclass_fields__)
    unknown = sorted(set(data) - fields)
    if unknown or not isinstance(data.get("verdict"), str) or not isinstance(data.get("cases", []), list):
        raise ValueError(f"not a proof record (fields {unknown or sorted(data)})")
    cases = []
    for case in data.get("cases", []):
        if not isinstance(case, dict) or set(case) - set(ProofCase.__dataclass_fields__):
            raise ValueError(f"not a proof case: {str(case)[:120]}")
        cases.append(ProofCase(**case))
    return PortProof(**{**data, "cases": cases})


def child_outcome(result_path: Path, phase_path: Path, log_path: Path, code: Optional[int],
                  timed_out: bool, timeout_s: float, timeout_setting: str,
                  environ: Optional[Mapping[str, str]] = None, too_loud: bool = False) -> PortProof:
    """The proof a finished child leaves: its result, else a FAIL saying how it ended
    (``code``: its exit status, negative for a signal; ``timeout_setting``: what sets the
    limit, for the message; ``too_loud``: stopped past :data:`MAX_LOG_BYTES` of output)."""
    try:
        phase = (read_text(phase_path, MAX_TASK_RESULT_BYTES) if phase_path.exists() else "") or STARTING
    except UnreadableFile as exc:  # a FIFO or a huge file planted by the model code
        return PortProof(verdict=FAIL, error=scrub(f"the proof's result is unreadable: {exc}", environ))
    # A failed result is an exception the proof did not catch: said below as the log says it.
    result = {} if timed_out or too_loud else read_task_result(result_path)
    if too_loud:
        error = (f"the proof printed more than {MAX_LOG_BYTES >> 20} MiB during {phase}: its "
                 "process group was killed")
    elif timed_out:
        error = (f"the proof ran past its time limit of {timeout_s:g} s ({timeout_setting}) during "
                 f"{phase}: its process group was killed")
    elif result.get("status") == "ok":
        try:
            return proof_from_dict({k: v for k, v in result.items() if k not in TASK_FIELDS}, environ)
        except (ValueError, TypeError) as exc:
            error = f"the proof's result {result_path.name} is not a proof record: {exc}"
    elif str(result.get("error", "")).startswith(UNREADABLE_RESULT):  # what the child wrote was replaced
        error = f"the proof's result is unreadable: {result['error']}"
    elif phase == STARTING:
        line = last_exception(read_log_tail(log_path, 40))
        error = (f"the proof's child process ended ({describe_exit(code)}) before the proof began"
                 + (f": {line}" if line else ""))
    else:  # the proof had begun: the code it imported or ran ended the process
        line = last_exception(read_log_tail(log_path, 40))
        status = describe_exit(code) if code is None or code < 0 else f"status {code}"
        error = (f"the model code exited ({status}) during {phase}, before the proof wrote its "
                 f"result" + (f"; last error: {line}" if line else ""))
    return PortProof(verdict=FAIL, error=scrub(" ".join(error.split()), environ))


def prove_port_in_child(src: os.PathLike | str, dst: os.PathLike | str, *, dtype: str = "auto",
                        seed: int = 0, config_overrides: Optional[dict] = None,
                        timeout_s: float = DEFAULT_TIMEOUT_S,
                        timeout_setting: str = "--proof-timeout",
                        config_setting: str = "--proof-config") -> PortProof:
    """:func:`~hyport_lib.proof.port.prove_port` in a child process; past ``timeout_s`` its
    process group is killed and the proof is a FAIL naming ``timeout_setting``; a tiny model
    that cannot be built names ``config_setting``."""
    if not timeout_s > 0:
        raise ValueError(f"{timeout_setting}={timeout_s!r}: expected a number of seconds > 0")
    with tempfile.TemporaryDirectory(prefix="hyport-proof-") as scratch:
        scratch = Path(scratch)
        work = scratch / "cwd"  # empty: nothing in the child's working folder shadows a module
        work.mkdir()
        result_path, phase_path = scratch / "proof.json", scratch / "phase.txt"
        log_path = scratch / "proof.log"
        spec = {"src": str(Path(src).resolve()), "dst": str(Path(dst).resolve()), "dtype": dtype,
                "seed": seed, "config_overrides": config_overrides or {},
                "config_setting": config_setting, "phase": str(phase_path)}
        cmd, payload = task_command("hyport_lib.proof.port:prove_in_child", spec, result_path,
                                    label="[hyport port proof]", python_flags=("-B", "-P"))
        reaper = _Adopter()
        too_loud, ended = False, []
        try:
            # Interrupted (Ctrl-C), the group stops the child before the interrupt goes on.
            with ChildGroup() as group:
                # no bytecode written by the child or anything it starts
                child = group.start(cmd, env=task_environ({"PYTHONDONTWRITEBYTECODE": "1"}),
                                    log_path=log_path, payload=payload,
                                    timeout_s=timeout_s, cwd=work, name="port proof",
                                    log_tail_bytes=LOG_TAIL_BYTES)

                def stop_when_too_loud() -> None:
                    nonlocal too_loud
                    if log_size(log_path) > MAX_LOG_BYTES:
                        too_loud, child.deadline = True, time.monotonic()  # stopped at the next poll

                group.wait(lambda *how: ended.append(Ended(*how)), poll_interval_s=POLL_S,
                           kill_grace_s=KILL_GRACE_S, on_tick=stop_when_too_loud)
        finally:
            reaper.kill_adopted()  # what left the group (setsid) and outlived the child
        return child_outcome(result_path, phase_path, log_path, ended[0].code,
                             ended[0].timed_out and not too_loud, timeout_s, timeout_setting,
                             too_loud=too_loud)


class _Adopter:
    """Makes this process the reaper of the proof's orphans (Linux's
    ``PR_SET_CHILD_SUBREAPER``) while the proof runs: a process the model code starts in
    a session of its own (``os.setsid``) leaves the child's process group, and would
    outlive the proof; it is adopted by this process when the child ends, and killed."""

    def __init__(self) -> None:
        self._libc = None
        self._was = ctypes.c_int(0)
        self._before: set[int] = set()
        if not sys.platform.startswith("linux"):
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(self._was), 0, 0, 0) != 0 \
                    or libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                return
        except (OSError, AttributeError):
            return
        self._libc = libc
        self._before = _children()

    def kill_adopted(self) -> None:
        """SIGKILL and reap every child of this process started since (an adopted orphan:
        the proof's child itself is reaped already), theirs too; then the reaper setting
        back as it was."""
        if self._libc is None:
            return
        try:
            for _ in range(1000):  # each round adopts the children of the last one killed
                adopted = _children() - self._before
                if not adopted:
                    break
                for pid in adopted:
                    try:
                        os.kill(pid, signal.SIGKILL)  # ours, not reaped: the pid is still its own
                        os.waitpid(pid, 0)
                    except (ProcessLookupError, ChildProcessError):
                        pass
        finally:
            self._libc.prctl(_PR_SET_CHILD_SUBREAPER, self._was.value, 0, 0, 0)


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children()}
