"""The N-card inference grid: one fresh worker process per card, watched from here.

Each card gets its own OS process, started with ``subprocess.Popen`` (fork + exec, so
the worker is a fresh interpreter: accelerate refuses a process forked after the
device was initialised with "Cannot re-initialize NPU in forked subprocess"). The
worker is pinned to its card through the backend seam's visible-devices variable,
writes ``card<N>.log`` (stdout and stderr) and ``card<N>.json`` (its result) in the
log folder, and runs in its own session, hence its own process group.

Workers never outlive the launcher. The worker's stdin is a pipe whose write end only
the launcher holds: the worker reads its configuration from it (so secret values never
touch the disk; ``card<N>.config.json`` is a scrubbed copy for the record), then starts
a tiny ``sh`` guard in its process group that waits for end-of-file on that pipe and
then SIGKILLs the group. The kernel closes the pipe however the launcher ends, even by
SIGKILL or by ipykernel's ``os._exit`` when papermill goes away, so the worker and
every child it started die with it. Linux's ``PR_SET_PDEATHSIG`` is not used: it would
SIGKILL the worker alone and orphan the worker's own children, it fires when the
spawning *thread* exits rather than the process, and it does not exist on macOS. A
watchdog thread inside the worker is not used either: it needs the GIL, which a worker
stuck in a C call may hold. ``hyport infer`` also turns SIGTERM and SIGHUP into
``SystemExit`` so that the orderly cleanup below runs.

Whatever the workers write is scrubbed of secret values (variables whose names look
secret, see :mod:`hyport_lib.utils.redact`) once they exit: the log is rewritten in
place, and the result and the grid's own record never hold them.

The launcher only watches: it never imports torch for the workers' sake and never
touches the device. A worker that raises, dies (signal, ``os._exit``, out-of-memory
kill) or runs past ``timeout_s`` becomes a row with its reason; the others finish; a
hung worker's whole process group is killed (only groups this module started); the
call always returns a :class:`GridResult`.

Before launching, the preflight asks the environment check which cards are busy and
skips them unless ``allow_busy_cards=True``. No process is ever killed for being in
the way.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

import hyport_lib
from hyport_lib.backend import Backend, get_backend
from hyport_lib.results import Provenance, results_dir
from hyport_lib.utils.files import atomic_write_json, atomic_write_text
from hyport_lib.utils.redact import child_environ, scrub_obj, scrub_text, secret_values

STATUSES = ("ok", "failed", "timeout", "skipped-busy")
#: What torch_npu prints when an operator has no NPU kernel.
FALLBACK_MARKER = "will fall back to run on the CPU"
_FALLBACK_OP_RE = re.compile(r"operator '([^']+)'[^\n]*?" + re.escape(FALLBACK_MARKER))
_EXC_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Fault))(?::\s?(.*))?$")
PREVIEW_CHARS = 60
LOG_TAIL_LINES = 8

COLUMNS = [
    "card", "device", "status", "load_s", "first_token_s", "tokens_per_s", "decode_tokens_per_s",
    "new_tokens",
    "peak_memory_mb", "memory_source", "single_output", "batch_outputs", "output_hash",
    "cpu_fallback_warnings", "fallback_ops", "wall_s", "log_path", "error",
]


# --------------------------------------------------------------------------- preflight
@dataclass
class CardPlan:
    """What the preflight decided for one card."""

    card: int
    run: bool
    busy_processes: list[dict] = field(default_factory=list)

    @property
    def busy_reason(self) -> str:
        procs = ", ".join(
            f"pid {p.get('pid')} ({p.get('name') or '?'}, {p.get('memory_mb', '?')} MB)"
            for p in self.busy_processes)
        return f"card busy: {procs}" if procs else ""


@dataclass
class GridPlan:
    kind: str
    cards: list[CardPlan]
    allow_busy_cards: bool
    preflight_error: Optional[str] = None

    @property
    def to_run(self) -> list[int]:
        return [c.card for c in self.cards if c.run]

    def frame(self) -> pd.DataFrame:
        """One row per card: what the preflight decided and why."""
        return pd.DataFrame([{
            "card": c.card,
            "status": ("run (busy, allowed)" if c.busy_processes else "run") if c.run else "skipped-busy",
            "processes": c.busy_reason.removeprefix("card busy: ") or "none",
        } for c in self.cards], columns=["card", "status", "processes"])

    def to_dict(self) -> dict:
        return {"kind": self.kind, "allow_busy_cards": self.allow_busy_cards,
                "preflight_error": self.preflight_error,
                "cards": [{**asdict(c), "busy_reason": c.busy_reason} for c in self.cards]}


def available_cards(backend: Backend, num_cards: Optional[int] = None) -> list[int]:
    """Card ids the grid may use, as the device tools number them.

    On CPU "cards" are worker processes ``0..num_cards-1`` (default: the backend's
    count, 2). On an accelerator they are the visible cards; when this process already
    runs under a visible-devices variable (e.g. ``ASCEND_RT_VISIBLE_DEVICES=4,5``),
    its entries are the ids a child must be pinned to.
    """
    if num_cards is not None and int(num_cards) < 1:
        raise ValueError(f"num_cards={num_cards!r}: expected a positive number or None (all cards)")
    if backend.kind == "cpu":
        return list(range(int(num_cards) if num_cards else backend.num_cards()))
    ids = list(range(backend.num_cards()))
    var = backend.visible_devices_var
    inherited = os.environ.get(var) if var else None
    if inherited is not None:
        ids = inherited_card_ids(var, inherited)[:len(ids)]
    if num_cards is not None:
        if int(num_cards) > len(ids):
            raise ValueError(f"num_cards={num_cards}: only {len(ids)} {backend.kind} card(s) are visible")
        ids = ids[:int(num_cards)]
    return ids


def inherited_card_ids(var: str, value: str) -> list[int]:
    """Host card ids listed by an inherited visible-devices variable, in order.

    The grid pins each worker with ``var=<id>``, so it must know the host index
    behind every card this process sees. Anything it cannot map that way is an error
    naming the variable, rather than a crash or a worker pinned to the wrong card.

    Raises:
        ValueError: the value hides every card, selects cards by UUID, holds a range
            (``0-1``), a non-number, an empty entry, a duplicate, or (Ascend) a space.
    """
    from hyport_lib.environment.checks import parse_visible_devices

    ascend = var.upper().startswith("ASCEND")
    shown = f"{var}={value!r}"
    text = value.strip()
    if not text or (not ascend and text == "-1"):
        raise ValueError(f"{shown} hides every card: unset it, or list the card indices to use (e.g. 0,1)")
    if ascend and re.search(r"\s", text):
        raise ValueError(f"{shown}: remove the spaces (the Ascend runtime stops reading at one)")
    entries = [e.strip() for e in text.split(",")]
    if len(entries) > 1 and not entries[-1]:
        entries.pop()  # a trailing comma: the runtimes ignore it
    for entry in entries:
        if not ascend and entry.upper().startswith(("GPU-", "MIG-")):
            raise ValueError(
                f"{shown} selects cards by UUID; the grid pins each worker by card index, so set "
                f"it to indices instead (nvidia-smi -L lists each GPU's index and UUID)")
        if not entry:
            raise ValueError(f"{shown} has an empty entry; list the card indices, e.g. 0,1")
        if not entry.isdigit():
            hint = " (ranges are not understood: list each card, e.g. 0,1)" if "-" in entry else ""
            raise ValueError(f"{shown}: {entry!r} is not a card index{hint}")
    ids = [int(e) for e in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{shown} lists card {duplicates[0]} more than once; list each card once")
    # What the runtime itself reads must be what the grid maps (e.g. CUDA strips spaces).
    seen = parse_visible_devices(value, var)
    if seen != ids:
        raise ValueError(f"{shown}: the runtime reads cards {seen} from it, the grid {ids}; "
                         f"write it as {','.join(map(str, ids))}")
    return ids


def _as_dict(process: Any) -> dict:
    if is_dataclass(process):
        return asdict(process)
    if isinstance(process, dict):
        return dict(process)
    return {k: getattr(process, k, None) for k in ("pid", "name", "memory_mb")}


def _busy_from_environment(backend: Backend) -> tuple[dict, Optional[str]]:
    """Ask the environment check which cards hold processes; unknown is not busy."""
    from hyport_lib.environment.devices import probe_devices

    try:
        listing = probe_devices(backend)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        return {}, f"busy-card check failed: {type(exc).__name__}: {exc}"
    busy = {d.index: list(d.processes) for d in listing.devices if d.processes}
    note = None
    if not listing.processes_known:
        note = f"busy-card check could not list processes ({listing.error or listing.source})"
    elif listing.error:
        note = f"busy-card check: {listing.error}"
    return busy, note


def plan_grid(backend: Backend, num_cards: Optional[int] = None, allow_busy_cards: bool = False,
              cards: Optional[list[int]] = None, busy: Optional[dict] = None) -> GridPlan:
    """Preflight: which cards run, which are skipped because another process holds them.

    Args:
        backend: the backend seam for the device kind.
        num_cards: how many cards (None: all available; CPU default 2).
        allow_busy_cards: run on busy cards anyway (nothing is ever killed).
        cards: explicit card ids instead of the first ``num_cards``.
        busy: ``{card: [process, ...]}``; by default asked from the environment
            check (``hyport_lib.environment.devices.probe_devices``: npu-smi on
            Ascend, nvidia-smi on CUDA, nothing is busy on CPU).
    """
    ids = [int(c) for c in cards] if cards is not None else available_cards(backend, num_cards)
    if len(set(ids)) != len(ids):
        raise ValueError(f"cards={cards!r}: each card may appear once")
    preflight_error = None
    if busy is None:
        busy, preflight_error = _busy_from_environment(backend)
    plans = []
    for card in ids:
        procs = [_as_dict(p) for p in (busy.get(card) or [])]
        plans.append(CardPlan(card=card, run=allow_busy_cards or not procs, busy_processes=procs))
    return GridPlan(kind=backend.kind, cards=plans, allow_busy_cards=allow_busy_cards,
                    preflight_error=preflight_error)


# --------------------------------------------------------------------------- results
@dataclass
class GridProgress:
    """Passed to ``on_update``: the table so far (unfinished cards say ``running``)."""

    frame: pd.DataFrame
    done: int
    total: int
    card: Optional[int] = None  # the card that just finished; None for the first call
    status: Optional[str] = None


@dataclass
class GridResult:
    """The grid's answer: one row per card plus the cross-card comparison."""

    frame: pd.DataFrame
    consistent: bool
    differing_cards: list[int]
    log_dir: Path
    wall_s: float
    provenance: Provenance
    plan: Optional[GridPlan] = None
    config: dict = field(default_factory=dict)
    timeout_s: float = 0.0
    cards: list[dict] = field(default_factory=list)  # raw worker results, full outputs

    @property
    def counts(self) -> dict[str, int]:
        return {s: int((self.frame["status"] == s).sum()) for s in STATUSES}

    @property
    def consistency_line(self) -> str:
        return consistency_line(self)

    def log_tail(self, card: int, lines: int = 40) -> str:
        row = self.frame.loc[self.frame["card"] == card]
        if row.empty:
            raise KeyError(f"card={card}: not in this grid (cards {list(self.frame['card'])})")
        path = row.iloc[0]["log_path"]
        return read_log_tail(path, lines) if given(path) else "(not launched: no log)"

    def to_dict(self) -> dict:
        frame = self.frame.astype(object).where(self.frame.notna(), None)
        return {
            "rows": frame.to_dict(orient="records"),
            "consistent": self.consistent,
            "differing_cards": list(self.differing_cards),
            "consistency": self.consistency_line,
            "counts": self.counts,
            "log_dir": str(self.log_dir),
            "wall_s": round(self.wall_s, 3),
            "timeout_s": self.timeout_s,
            "provenance": self.provenance.to_dict(),
            "plan": self.plan.to_dict() if self.plan else None,
            "config": self.config,
            # Full texts, not previews: what each card said, for the report.
            "outputs": {str(c["card"]): {"single": (c.get("outcome") or {}).get("single_output"),
                                         "batch": (c.get("outcome") or {}).get("batch_outputs")}
                        for c in self.cards if c.get("outcome")},
        }


def given(value: Any) -> bool:
    """A table cell holds a value (pandas turns a missing one into None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def read_log_tail(path: os.PathLike | str, lines: int = LOG_TAIL_LINES) -> str:
    """Last ``lines`` lines of a log, secrets scrubbed; empty when there is no log."""
    path = Path(path)
    if not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64 * 1024))
        text = fh.read().decode("utf-8", errors="replace")
    return scrub_text("\n".join(text.splitlines()[-lines:]))


def scan_fallbacks(path: os.PathLike | str) -> tuple[int, list[str]]:
    """Count torch_npu's CPU-fallback warnings in a log; the operators they name."""
    path = Path(path)
    if not path.is_file():
        return 0, []
    text = path.read_text(encoding="utf-8", errors="replace")
    ops = sorted(set(_FALLBACK_OP_RE.findall(text)))
    return text.count(FALLBACK_MARKER), ops


def last_exception(log_text: str) -> Optional[str]:
    """The last ``SomeError: message`` line of a log (a Python traceback's last line)."""
    for line in reversed(log_text.splitlines()):
        match = _EXC_LINE_RE.match(line.strip())
        if match:
            return line.strip()
    return None


def preview(text: Any, chars: int = PREVIEW_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def consistency(frame: pd.DataFrame) -> tuple[bool, list[int], Optional[str]]:
    """Compare the ok cards' output hashes.

    Returns ``(consistent, differing cards, reference hash)``: the reference is the
    most common hash (ties: the lowest card's); no ok card means not consistent.
    """
    ok = frame[frame["status"] == "ok"].sort_values("card")
    if ok.empty:
        return False, [], None
    counts = ok["output_hash"].value_counts()
    top = counts.max()
    reference = next(h for h in ok["output_hash"] if counts[h] == top)
    differing = [int(c) for c, h in zip(ok["card"], ok["output_hash"]) if h != reference]
    return not differing, differing, reference


def consistency_line(result: GridResult) -> str:
    """One sentence on whether the cards agree."""
    ok = result.frame[result.frame["status"] == "ok"]
    if ok.empty:
        return "No card finished, so there is nothing to compare."
    _, differing, reference = consistency(result.frame)
    reference = (reference or "")[:12]
    sampling = float(result.config.get("temperature") or 0.0) > 0
    note = " (sampling is on, so differences may be legitimate)" if sampling else ""
    if not differing:
        if len(ok) == 1:
            card = int(ok.iloc[0]["card"])
            return f"Only card {card} finished (output hash {reference}); nothing to compare."
        return f"All {len(ok)} finished cards produced identical outputs (hash {reference}){note}."
    return (f"Cards {', '.join(map(str, differing))} differ from the majority output "
            f"(hash {reference}, {len(ok) - len(differing)} of {len(ok)} cards){note}.")


def grid_verdict(result: GridResult) -> str:
    """PASS: every launched card ok and all agree; WARN: ok but busy cards skipped or
    outputs differ; FAIL: a card failed or timed out, or none ran."""
    counts = result.counts
    if counts["failed"] or counts["timeout"] or counts["ok"] == 0:
        return "FAIL"
    if counts["skipped-busy"] or not result.consistent:
        return "WARN"
    return "PASS"


def grid_headline(result: GridResult) -> dict:
    """A few figures for the report's index table."""
    ok = result.frame[result.frame["status"] == "ok"]
    launched = len(result.frame) - result.counts["skipped-busy"]

    def median(col):
        values = [float(v) for v in ok[col] if given(v)]
        return round(statistics.median(values), 3) if values else None

    return {
        "cards ok": f"{len(ok)}/{launched}",
        "skipped busy": result.counts["skipped-busy"],
        "consistent": bool(result.consistent),
        "tokens/s incl. prefill (median)": median("tokens_per_s"),
        "decode tokens/s (median)": median("decode_tokens_per_s"),
        "load s (median)": median("load_s"),
        "first token s (median)": median("first_token_s"),
        "CPU fallback warnings": int(sum(int(v) for v in result.frame["cpu_fallback_warnings"] if given(v))),
    }


# --------------------------------------------------------------------------- launching
@dataclass
class _Worker:
    card: int
    proc: subprocess.Popen
    started: float
    deadline: float
    log_path: Path
    result_path: Path
    lifeline: Optional[int] = None  # write end of the worker's stdin; closing it ends the worker
    unsent: bytes = b""  # the part of the worker's configuration not yet in the pipe


def default_log_dir() -> Path:
    """A fresh folder beside the results: ``<results>/../inference_logs/<stamp>``."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return (results_dir().parent / "inference_logs" / f"{stamp}-{os.getpid()}").resolve()


def _worker_env(backend: Backend, card: int, num_threads: Optional[int],
                extra_env: Optional[dict]) -> dict[str, str]:
    extra = {
        "HYPORT_CARD_INDEX": str(card),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # hyport_lib must import in the child even when it is not installed.
        "PYTHONPATH": os.pathsep.join(p for p in (
            str(Path(hyport_lib.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")) if p),
    }
    extra.update(backend.visible_devices_env([card]))
    if num_threads:
        extra.update({"OMP_NUM_THREADS": str(num_threads), "MKL_NUM_THREADS": str(num_threads)})
    extra.update(extra_env or {})
    return child_environ(extra)


def _threads_per_worker(backend: Backend, workers: int) -> Optional[int]:
    """On CPU the workers share the cores: split them so they do not oversubscribe."""
    if backend.kind != "cpu" or workers < 1:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


def _launch(backend: Backend, card: int, spec: dict, log_dir: Path, timeout_s: float,
            extra_env: Optional[dict], secrets_env: dict) -> _Worker:
    log_path = log_dir / f"card{card}.log"
    result_path = log_dir / f"card{card}.json"
    config_path = log_dir / f"card{card}.config.json"
    result_path.unlink(missing_ok=True)  # never read a previous run's result
    # The file is a record for people; the worker gets the real values on its stdin.
    atomic_write_json(config_path, scrub_obj(spec, secrets_env))
    cmd = [sys.executable, "-m", "hyport_lib.inference.worker",
           "--config", "-", "--result", str(result_path), "--die-with-stdin"]
    read_end, lifeline = os.pipe()  # both non-inheritable: no other child gets the write end
    started = time.monotonic()
    try:
        with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=read_end,
                env=_worker_env(backend, card, spec.get("num_threads"), extra_env),
                start_new_session=True,  # its own process group: killable as a whole
                close_fds=True)
    except BaseException:
        os.close(lifeline)
        raise
    finally:
        os.close(read_end)
    # Non-blocking: a worker that never reads must not stall the launcher (see _feed).
    os.set_blocking(lifeline, False)
    worker = _Worker(card, proc, started, started + timeout_s, log_path, result_path,
                     lifeline=lifeline, unsent=json.dumps(spec, default=str).encode() + b"\n")
    _feed(worker)
    return worker


def _feed(worker: _Worker) -> None:
    """Write what the pipe takes of the worker's configuration; the rest on a later poll."""
    if not worker.unsent or worker.lifeline is None:
        return
    try:
        written = os.write(worker.lifeline, worker.unsent)
    except BlockingIOError:
        return  # pipe full: the worker has not read yet
    except BrokenPipeError:
        worker.unsent = b""  # it exited before reading; its exit status will say why
        return
    worker.unsent = worker.unsent[written:]


def _cut_lifeline(worker: _Worker) -> None:
    """Close the worker's stdin; its guard then kills whatever is left of its group."""
    if worker.lifeline is not None:
        os.close(worker.lifeline)
        worker.lifeline = None


def scrub_log(path: os.PathLike | str, environ: Optional[dict] = None) -> bool:
    """Rewrite a log without secret values (atomically); True when it changed.

    Args:
        path: the log file; a missing one is left alone.
        environ: where the secret variables are looked up (default ``os.environ``).
    """
    path = Path(path)
    if not secret_values(environ) or not path.is_file():
        return False
    text = path.read_bytes().decode("utf-8", errors="replace")
    scrubbed = scrub_text(text, environ)
    if scrubbed == text:
        return False
    atomic_write_text(path, scrubbed)
    return True


def _exited(proc: subprocess.Popen) -> bool:
    """Has the worker exited? Does not reap it, so its pid (= its group id) stays ours."""
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


def _kill_groups(workers: list[_Worker], grace_s: float) -> None:
    """SIGTERM, then after ``grace_s`` SIGKILL, the process groups of ``workers``.

    Only groups this module started: each group id is a worker's pid, and the worker
    is never reaped before the SIGKILL, so the id cannot have passed to an unrelated
    process. All groups share one grace period, so eight hung workers cost one wait.
    """
    for worker in workers:
        try:
            os.killpg(worker.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue  # the whole group is gone already
    end = time.monotonic() + grace_s
    while time.monotonic() < end and not all(_exited(w.proc) for w in workers):
        time.sleep(0.05)
    for worker in workers:
        try:
            os.killpg(worker.proc.pid, signal.SIGKILL)  # also children the leader left behind
        except ProcessLookupError:
            continue  # every member already gone


def _reap_leftovers(worker: _Worker) -> None:
    """After the leader exited (not yet reaped): kill any child it left in its group."""
    if worker.proc.returncode is not None:
        return  # already reaped: its pid may be reused, so its group is no longer ours
    try:
        os.killpg(worker.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group held only the (exited) leader


def _row_for(worker: _Worker, timed_out: bool, timeout_s: float, device: str,
             secrets_env: Optional[dict] = None) -> tuple[dict, dict]:
    """Build the table row of a finished worker; returns (row, raw result), both scrubbed."""
    rc = worker.proc.returncode
    wall = time.monotonic() - worker.started
    raw: dict = {}
    if worker.result_path.is_file():
        try:
            raw = json.loads(worker.result_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raw = {"status": "failed", "error_type": type(exc).__name__,
                   "error": f"unreadable result file {worker.result_path}: {exc}"}
    raw = scrub_obj(raw, secrets_env)
    tail = scrub_text(read_log_tail(worker.log_path), secrets_env)
    fallbacks, fallback_ops = scan_fallbacks(worker.log_path)
    row = {c: None for c in COLUMNS}
    row.update(card=worker.card, device=device, wall_s=round(wall, 3),
               log_path=str(worker.log_path), cpu_fallback_warnings=fallbacks,
               fallback_ops=", ".join(fallback_ops))
    if timed_out:
        status, reason = "timeout", f"timeout after {timeout_s:g}s; process group killed"
        if raw.get("status") == "ok":
            reason += " (the result was written, but the process did not exit)"
    elif raw.get("status") == "ok":
        status = "ok"
        reason = None if rc == 0 else f"note: exit code {rc} after the result was written"
    elif raw.get("status") == "failed":
        status, reason = "failed", f"{raw.get('error_type', 'Error')}: {raw.get('error', '')}"
    elif rc is not None and rc < 0:
        name = _signal_name(-rc)
        hint = (" (SIGKILL is also how the out-of-memory killer ends a process)"
                if -rc == signal.SIGKILL else "")
        status, reason = "failed", f"killed by signal {name} ({rc}){hint}"
    else:
        exc_line = last_exception(tail)
        status = "failed"
        reason = f"exit code {rc} without result" + (f"; {exc_line}" if exc_line else "")
    if raw.get("status") == "ok":
        out = raw.get("outcome") or {}
        peak = raw.get("peak_memory_bytes")
        row.update(
            load_s=out.get("load_s"), first_token_s=out.get("first_token_s"),
            tokens_per_s=out.get("tokens_per_s"), decode_tokens_per_s=out.get("decode_tokens_per_s"),
            new_tokens=out.get("new_tokens"),
            peak_memory_mb=round(peak / 2**20, 1) if peak else None,
            memory_source=raw.get("memory_source"),
            single_output=preview(out.get("single_output")),
            batch_outputs=[preview(t) for t in (out.get("batch_outputs") or [])],
            output_hash=out.get("output_hash"))
    row["status"] = status
    if reason:
        row["error"] = scrub_text(reason, secrets_env) + (f"\n{tail}" if tail and status != "ok" else "")
    raw.setdefault("card", worker.card)
    raw["returncode"] = rc
    return row, raw


def _skipped_row(plan: CardPlan, device: str) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(card=plan.card, device=device, status="skipped-busy", cpu_fallback_warnings=0,
               error=plan.busy_reason + " (pass allow_busy_cards=True to use it anyway)")
    return row


def _frame(rows: dict[int, dict], order: list[int]) -> pd.DataFrame:
    return pd.DataFrame([rows[c] for c in order], columns=COLUMNS)


def _config_dict(config: Any) -> dict:
    if config is None:
        from hyport_lib.inference.generate import InferenceConfig

        config = InferenceConfig()
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    if isinstance(config, dict):
        return dict(config)
    raise TypeError(f"config={config!r}: expected an InferenceConfig, a dict or None")


def run_grid(config: Any = None, *, device: str = "auto", num_cards: Optional[int] = None,
             cards: Optional[list[int]] = None, timeout_s: float = 300.0,
             allow_busy_cards: bool = False, log_dir: Optional[os.PathLike] = None,
             on_update: Optional[Callable[[GridProgress], None]] = None,
             extra_env: Optional[dict] = None, poll_interval_s: float = 0.1,
             kill_grace_s: float = 2.0, backend: Optional[Backend] = None) -> GridResult:
    """Run the same inference on every card, one fresh process each.

    Args:
        config: an ``InferenceConfig`` (or its dict); each worker replaces ``device``
            with its own pinned card. None: the defaults (tiny model).
        device: backend kind (``auto``, ``npu``, ``cuda``, ``cpu``).
        num_cards: cards to use; None = all available (CPU: 2 worker processes).
        cards: explicit card ids instead of the first ``num_cards``.
        timeout_s: per-worker wall-clock limit; all workers start together, so the grid
            returns within about ``timeout_s`` plus a few seconds.
        allow_busy_cards: also run on cards another process holds.
        log_dir: where ``card<N>.log`` / ``card<N>.json`` go (default: a fresh folder
            beside the results).
        on_update: called with a :class:`GridProgress` at the start and whenever a card
            finishes (a live table in the notebook, a progress bar in the CLI).
        extra_env: extra variables for the workers (secret-looking ones among them
            are scrubbed from the logs and results like those of this process).
        poll_interval_s: how often the workers are checked.
        kill_grace_s: between SIGTERM and SIGKILL of a timed-out worker's group.
        backend: an already built backend (else ``get_backend(device)``).

    Returns:
        GridResult with one row per card (see :data:`COLUMNS`). Its ``config`` and
        ``cards`` and the files in ``log_dir`` hold no secret values.
    """
    if timeout_s is None or float(timeout_s) <= 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of seconds")
    t0 = time.monotonic()
    backend = backend or get_backend(device)
    inference = _config_dict(config)
    plan = plan_grid(backend, num_cards=num_cards, allow_busy_cards=allow_busy_cards, cards=cards)
    if plan.to_run and (inference.get("model_path") or "tiny") == "tiny":
        # Build the tiny model once here rather than in every worker at once.
        from hyport_lib.models.tiny import ensure_tiny_model

        inference["model_path"] = str(ensure_tiny_model())
    order = [c.card for c in plan.cards]
    secrets_env = {**os.environ, **(extra_env or {})}
    log_dir = Path(log_dir).resolve() if log_dir else default_log_dir()
    log_dir.mkdir(parents=True, exist_ok=True)

    def label(card: int) -> str:  # the card as the device tools number it
        return "cpu" if backend.kind == "cpu" else f"{backend.kind}:{card}"

    threads = _threads_per_worker(backend, len(plan.to_run))

    rows: dict[int, dict] = {}
    for p in plan.cards:
        row = _skipped_row(p, label(p.card)) if not p.run else {
            **{c: None for c in COLUMNS}, "card": p.card, "device": label(p.card), "status": "running",
            "log_path": str(log_dir / f"card{p.card}.log")}
        rows[p.card] = row
    total = len(order)
    raws: dict[int, dict] = {}

    def notify(card=None, status=None):
        if on_update is None:
            return
        done = sum(1 for r in rows.values() if r["status"] != "running")
        try:
            on_update(GridProgress(_frame(rows, order), done, total, card, status))
        except Exception as exc:  # a broken display must not abandon running workers
            warnings.warn(f"run_grid: on_update failed ({type(exc).__name__}: {exc}); "
                          "the grid goes on", RuntimeWarning, stacklevel=2)

    def finish(worker: _Worker, timed_out: bool) -> None:
        worker.proc.wait()
        _cut_lifeline(worker)
        pending.remove(worker)
        scrub_log(worker.log_path, secrets_env)
        rows[worker.card], raws[worker.card] = _row_for(
            worker, timed_out, float(timeout_s), label(worker.card), secrets_env)
        notify(worker.card, rows[worker.card]["status"])

    pending: list[_Worker] = []
    try:
        for p in plan.cards:
            if not p.run:
                continue
            spec = {"card": p.card, "device_kind": backend.kind, "num_threads": threads,
                    "inference": inference}
            try:
                pending.append(_launch(backend, p.card, spec, log_dir, float(timeout_s), extra_env,
                                       secrets_env))
            except OSError as exc:
                rows[p.card].update(status="failed", cpu_fallback_warnings=0,
                                    error=f"could not start the worker: {type(exc).__name__}: {exc}")
        notify()
        while pending:
            for worker in pending:
                _feed(worker)
            now = time.monotonic()
            for worker in [w for w in pending if _exited(w.proc)]:
                _reap_leftovers(worker)
                finish(worker, timed_out=False)
            expired = [w for w in pending if now >= w.deadline]
            if expired:
                _kill_groups(expired, kill_grace_s)
                for worker in expired:
                    finish(worker, timed_out=True)
            if pending:
                time.sleep(poll_interval_s)
    finally:
        # Interrupted (KeyboardInterrupt in the notebook, SIGTERM in the CLI): leave no
        # worker behind, and no secret in what they wrote.
        if pending:
            _kill_groups(pending, 0.0)
            for worker in pending:
                worker.proc.wait()
                _cut_lifeline(worker)
                scrub_log(worker.log_path, secrets_env)

    frame = _frame(rows, order)
    consistent, differing, _ = consistency(frame)
    return GridResult(
        frame=frame, consistent=consistent, differing_cards=differing, log_dir=log_dir,
        wall_s=time.monotonic() - t0, provenance=Provenance(device=backend.kind), plan=plan,
        config=scrub_obj(inference, secrets_env), timeout_s=float(timeout_s),
        cards=[raws[c] for c in order if c in raws])


def record_grid(result: GridResult, stage: str = "03_inference", **kwargs) -> Path:
    """Record the grid through the shared results helper (notebook and CLI alike)."""
    from hyport_lib.results import record_result

    return record_result(
        stage, grid_verdict(result), summary=result.consistency_line,
        headline=grid_headline(result), data=result.to_dict(), provenance=result.provenance,
        **kwargs)
