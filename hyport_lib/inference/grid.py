"""The N-card inference grid (:func:`run_grid`), one fresh worker process per card, and its
result: one row per card and the cross-card comparison.

Fork + exec, never a bare fork: accelerate refuses a process forked after the device was
initialised ("Cannot re-initialize NPU in forked subprocess"). Each worker is pinned to its
card through the backend's visible-devices variable and writes ``card<N>.log`` and
``card<N>.json``; its configuration travels on stdin (:mod:`hyport_lib.processes`), so
secret values never touch the disk. The launcher never touches a device: a worker that
raises, dies or runs past ``infer_timeout_s`` becomes a row with its reason, the others
finish, and the call always returns a :class:`GridResult`.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from hyport_lib.backend import Backend
from hyport_lib.devices.card_plan import CardPlan, GridPlan
from hyport_lib.inference.agreement import NodeEntry, hosts_by_cards, hosts_line
from hyport_lib.inference.params import Params
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.tiny import TINY_MODEL_NAME, ensure_tiny_model
from hyport_lib.processes import (Child, ChildGroup, describe_exit, last_exception, read_log_tail, read_task_result,
                                  task_command, task_environ)
from hyport_lib.proof.choice import AttentionChoice
from hyport_lib.results import Provenance
from hyport_lib.triage import Triage, cann_log_dir, diagnose, own_cann_log_env, shared_cann_note
from hyport_lib.utils.files import atomic_write_json, ensure_writable
from hyport_lib.utils.printable import shortened
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.scrub_log import scrub_log
from hyport_lib.utils.typed_records import fields_of, from_mapping, to_mapping
from hyport_lib.utils.wording import counted

STATUSES = ("ok", "failed", "timeout", "skipped-busy", "interrupted", "not-started")
#: A card stopped before it ended: its worker was running, or was never started.
STOPPED_STATUSES = ("interrupted", "not-started")
#: What torch_npu prints when an operator has no NPU kernel.
FALLBACK_MARKER = "will fall back to run on the CPU"
_FALLBACK_OP_RE = re.compile(r"operator '([^']+)'[^\n]*?" + re.escape(FALLBACK_MARKER))
PREVIEW_CHARS = 60

#: ``host`` and ``node`` are given where the job has several hosts (node 0's merged grid, a
#: node's own cards); a one-host grid leaves them empty.
COLUMNS = [
    "host", "node", "card", "device", "status", "load_s", "cold_s", "first_token_s", "tokens_per_s",
    "decode_tokens_per_s",
    "new_tokens",
    "peak_memory_mb", "memory_source", "single_output", "batch_outputs", "output_hash",
    "cpu_fallback_warnings", "fallback_ops", "wall_s", "log_path", "error", "diagnosis", "not_applicable",
]


@dataclass
class GridProgress:
    """The table so far, at the start, whenever a card finishes, every second or so between,
    and at the end (``running`` False; ``stopped`` when interrupted)."""

    frame: pd.DataFrame
    done: int
    total: int
    card: Optional[int] = None  # the card that just finished; None otherwise
    status: Optional[str] = None
    elapsed_s: dict = field(default_factory=dict)  # card -> seconds since its worker started
    running: bool = True
    stopped: bool = False
    waiting: str = ""  # a multi-host job: whom this node waits for ("node 1", "node 0's token")


@dataclass
class CardOutputs:
    """What one card said, in full."""

    single: Optional[str] = None
    batch: Optional[list[str]] = None


@dataclass
class GridResult:
    """``outputs``: each finished card's full texts (the rows hold previews), ``diagnoses``:
    what the logs of each card that did not finish say (:mod:`hyport_lib.triage`)."""

    rows: list[dict]
    consistent: bool
    differing_cards: list[int]
    log_dir: Path
    wall_s: float
    timeout_s: float = 0.0
    provenance: Optional[Provenance] = None
    plan: Optional[GridPlan] = None
    config: InferenceConfig = field(default_factory=InferenceConfig)
    #: the workers' attention as the plan chose it, with its proof
    attention: Optional[AttentionChoice] = None
    #: the plan's notes (memory, attention), one line each
    notes: list[str] = field(default_factory=list)
    #: each card's and the host's memory as the plan estimated it (None: not planned)
    memory: Optional[MemoryPlan] = None
    outputs: dict[str, CardOutputs] = field(default_factory=dict)
    diagnoses: dict[str, Triage] = field(default_factory=dict)
    #: the job's hosts (1: this host alone) and this node's place in it
    nnodes: int = 1
    node_rank: int = 0
    host: str = ""
    #: node 0's merged grid only: every node of the job, each reported or not
    nodes: list[NodeEntry] = field(default_factory=list)
    nodes_wait_s: float = 0.0

    @property
    def merged(self) -> bool:
        """Node 0's grid of every host's cards (its verdict is the job's)."""
        return bool(self.nodes)

    @property
    def hosts_cards(self) -> str:
        """``2 hosts × 8 cards`` of a merged grid; empty otherwise."""
        return hosts_by_cards(self.nodes) if self.nodes else ""

    @property
    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=COLUMNS)

    @property
    def counts(self) -> dict[str, int]:
        return {s: int((self.frame["status"] == s).sum()) for s in STATUSES}

    @property
    def consistency_line(self) -> str:
        frame = self.frame
        if self.merged:
            return hosts_line(frame, self.nodes, sampling=float(self.config.temperature or 0.0) > 0)
        ok = frame[frame["status"] == "ok"]
        if ok.empty:
            # Say why: the first card's error is usually every card's (a bad argument).
            errors = [str(e) for e in frame["error"] if isinstance(e, str) and e.strip()]
            why = f" Card {int(frame.iloc[0]['card'])}: {errors[0].strip().splitlines()[0][:300]}" \
                if errors and len(frame) else ""
            return f"No card finished, so there is nothing to compare.{why}"
        _, differing, reference = consistency(frame)
        reference = (reference or "")[:12]
        sampling = float(self.config.temperature or 0.0) > 0
        note = " (sampling is on, so differences may be legitimate)" if sampling else ""
        if differing:
            said = (f"Cards {', '.join(map(str, differing))} differ from the majority output "
                    f"(hash {reference}, {len(ok) - len(differing)} of {counted(len(ok), 'card')}){note}.")
        elif len(ok) == 1:
            said = f"Only card {int(ok.iloc[0]['card'])} finished (output hash {reference}); nothing to compare."
        else:
            said = f"All {len(ok)} finished cards produced identical outputs (hash {reference}){note}."
        # What of the configured inference this model could not run (the same on every card).
        parts = next((list(v) for v in ok["not_applicable"] if isinstance(v, list) and v), [])
        return said + (f" Not applicable to this model: {'; '.join(parts)}." if parts else "")

    def log_tail(self, card: int, lines: int = 40, node: Optional[int] = None) -> str:
        """The log tail of ``card`` (of ``node``'s host in a merged grid: its first by default)."""
        frame = self.frame
        row = frame.loc[(frame["card"] == card) & ((frame["node"] == node) if node is not None else True)]
        if row.empty:
            where = f" of node {node}" if node is not None else ""
            raise KeyError(f"card={card}{where}: not in this grid (cards {list(frame['card'])})")
        path = row.iloc[0]["log_path"]
        return read_log_tail(path, lines) if given(path) else "(not launched: no log)"

    def sample_answer(self) -> Optional[tuple[Any, str]]:
        """``(card, answer)`` of the first card that answered the single prompt."""
        for key in sorted(self.outputs, key=lambda k: (len(str(k)), str(k))):
            if self.outputs[key].single:
                return (int(key) if str(key).isdigit() else key), self.outputs[key].single
        return None

    def to_dict(self) -> dict:
        """The fields, the cards' agreement in words and their counts by status."""
        return {**fields_of(self), "consistency": self.consistency_line, "counts": self.counts}


def given(value: Any) -> bool:
    """A table cell holds a value (pandas turns a missing one into None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def figure(value: Any) -> Optional[float]:
    """A finite recorded figure as a float, else None."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return float(value) if real and math.isfinite(value) else None


def ok_median(frame: pd.DataFrame, column: str) -> Optional[float]:
    """The median of ``column`` over the cards that finished (None: no figure)."""
    kept = [v for v in map(figure, frame[frame["status"] == "ok"][column]) if v is not None]
    return statistics.median(kept) if kept else None


def scan_fallbacks(path: os.PathLike | str) -> tuple[int, list[str]]:
    """torch_npu's CPU-fallback warnings in a log, and the operators they name."""
    path = Path(path)
    if not path.is_file():
        return 0, []
    text = path.read_text(encoding="utf-8", errors="replace")
    ops = sorted(set(_FALLBACK_OP_RE.findall(text)))
    return text.count(FALLBACK_MARKER), ops


def consistency(frame: pd.DataFrame) -> tuple[bool, list[int], Optional[str]]:
    """``(consistent, differing cards, reference hash)`` of the ok cards' output hashes: the
    reference is the most common (ties: the lowest card's); no ok card: not consistent."""
    ok = frame[frame["status"] == "ok"].sort_values("card")
    if ok.empty:
        return False, [], None
    counts = ok["output_hash"].value_counts()
    top = counts.max()
    reference = next(h for h in ok["output_hash"] if counts[h] == top)
    differing = [int(c) for c, h in zip(ok["card"], ok["output_hash"]) if h != reference]
    return not differing, differing, reference


@dataclass
class InferencePlan:
    """What the grid runs, every check made. ``config`` is what every worker runs (each
    replaces ``device`` with its pinned card); its ``model_path`` is the checked folder, an
    allowed hub id, or ``"tiny"`` (built when the grid runs)."""

    params: Params
    backend: Backend
    card_plan: GridPlan
    config: InferenceConfig
    log_dir: Path
    attention: Optional[AttentionChoice] = None
    notes: list[str] = field(default_factory=list)  # what the plan decided that the reader should know
    memory: Optional[MemoryPlan] = None  # the memory model's fit of one worker per card


@dataclass
class _Worker:
    card: int
    child: Child
    result_path: Path
    cann_dir: Optional[Path] = None  # where CANN writes this worker's logs
    cann_shared: bool = False  # that folder is the user's, shared with the other cards
    started_at: float = 0.0  # time.time() at start: CANN logs older than this are not its own


def _threads_per_worker(backend: Backend, workers: int) -> Optional[int]:
    """On CPU the workers share the cores: split them so they do not oversubscribe."""
    if backend.kind != "cpu" or workers < 1:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


def _launch(group: ChildGroup, backend: Backend, card: int, spec: dict, log_dir: Path, timeout_s: float,
            extra_env: Optional[dict], secrets_env: dict) -> _Worker:
    log_path = log_dir / f"card{card}.log"
    result_path = log_dir / f"card{card}.json"
    config_path = log_dir / f"card{card}.config.json"
    result_path.unlink(missing_ok=True)  # never read a previous run's result
    # The file is a record for people; the worker gets the real values on its stdin.
    atomic_write_json(config_path, scrub_obj(spec, secrets_env))
    cmd, payload = task_command("hyport_lib.models.generation:run_on_card", spec, result_path,
                                label=f"[hyport worker] card {card}", teardown=backend.kind != "cpu")
    # CANN's logs of an NPU card in a folder of its own (unless the user chose one), so that a
    # failure is diagnosed from this card's logs, not from a neighbour's.
    own_folder = log_dir / "cann" / f"card{card}"
    own_cann = own_cann_log_env(own_folder, {**os.environ, **(extra_env or {})}) if backend.kind == "npu" else {}
    threads = spec.get("num_threads")
    env = task_environ({"TOKENIZERS_PARALLELISM": "false", **backend.visible_devices_env([card]),
                        **({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}),
                        **own_cann, **(extra_env or {})})
    started_at = time.time()
    child = group.start(cmd, env=env, log_path=log_path, payload=payload, timeout_s=timeout_s,
                        name=f"card {card}")
    cann_dir = cann_log_dir(env) if backend.kind == "npu" else None
    return _Worker(card, child, result_path, cann_dir=cann_dir, started_at=started_at,
                   cann_shared=cann_dir is not None and cann_dir != own_folder)


def _row_for(worker: _Worker, timed_out: bool, timeout_s: float, device: str,
             secrets_env: Optional[dict] = None) -> tuple[dict, dict]:
    """``(table row, raw result)`` of a finished worker. Nothing is scrubbed again here: the
    worker scrubbed its result, the log was scrubbed when the worker was reaped."""
    rc = worker.child.proc.returncode
    wall = time.monotonic() - worker.child.started
    raw = read_task_result(worker.result_path)
    tail = read_log_tail(worker.child.log_path)
    fallbacks, fallback_ops = scan_fallbacks(worker.child.log_path)
    row = _blank_row(card=worker.card, device=device, wall_s=round(wall, 3), log_path=str(worker.child.log_path),
                     cpu_fallback_warnings=fallbacks, fallback_ops=", ".join(fallback_ops))
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
        status, reason = "failed", describe_exit(rc, worker.child)
    else:
        exc_line = last_exception(tail)
        status = "failed"
        reason = f"exit code {rc} without result" + (f"; {exc_line}" if exc_line else "")
    if raw.get("status") == "ok":
        out = raw.get("outcome") or {}
        peak = raw.get("peak_memory_bytes")
        row.update({key: out.get(key) for key in ("load_s", "cold_s", "first_token_s", "tokens_per_s",
                                                  "decode_tokens_per_s", "new_tokens", "output_hash")})
        row.update(
            peak_memory_mb=round(peak / 2**20, 1) if peak else None,
            memory_source=raw.get("memory_source"),
            single_output=shortened(out.get("single_output"), PREVIEW_CHARS),
            batch_outputs=[shortened(t, PREVIEW_CHARS) for t in (out.get("batch_outputs") or [])],
            not_applicable=list(out.get("not_applicable") or []) + list(out.get("processor_unavailable") or []))
    row["status"] = status
    if reason:
        row["error"] = reason + (f"\n{tail}" if tail and status != "ok" else "")
    if status != "ok":
        # The card's own log, and its CANN logs written since it started (a margin for the
        # file system's clock granularity).
        raw["diagnosis"] = diagnose([worker.child.log_path], cann_dir=worker.cann_dir,
                                    since=worker.started_at - 2, environ=secrets_env)
        if worker.cann_shared:
            raw["diagnosis"].setdefault("notes", []).append(shared_cann_note(worker.cann_dir))
        row["diagnosis"] = Triage.from_dict(raw["diagnosis"]).summary_line()
    raw.setdefault("card", worker.card)
    raw["returncode"] = rc
    return row, raw


def _blank_row(**values) -> dict:
    return {**dict.fromkeys(COLUMNS), **values}


def _first_row(plan: CardPlan, device: str, log_dir: Path) -> dict:
    if plan.run:
        return _blank_row(card=plan.card, device=device, status="running", log_path=str(log_dir / f"card{plan.card}.log"))
    return _blank_row(card=plan.card, device=device, status="skipped-busy", cpu_fallback_warnings=0,
                      error=plan.busy_reason + " (pass allow_busy_cards=True to use it anyway)")


def _frame(rows: dict[int, dict], order: list[int]) -> pd.DataFrame:
    return pd.DataFrame([rows[c] for c in order], columns=COLUMNS)


def run_grid(plan: InferencePlan, *, on_progress: Optional[Callable[[GridProgress], None]] = None,
             extra_env: Optional[dict] = None, kill_grace_s: float = 2.0) -> GridResult:
    """The plan as it is (the card table a notebook showed is what runs). ``extra_env`` goes
    to the workers (its secret-looking values are scrubbed like this process's);
    ``kill_grace_s`` lies between SIGTERM and SIGKILL of a timed-out group. No secret value
    is in the result or the log folder.

    Raises:
        PermissionError: the log folder or the tiny model's cache cannot be written.
    """
    t0 = time.monotonic()
    backend, card_plan, log_dir = plan.backend, plan.card_plan, plan.log_dir
    timeout_s = float(plan.params.infer_timeout_s)
    inference = plan.config.to_dict()
    if inference["model_path"] == TINY_MODEL_NAME:
        # Built once here rather than by every worker (and not by the plan, which writes nothing).
        inference["model_path"] = str(ensure_tiny_model())
    if Path(inference["model_path"]).is_dir() and "HF_HUB_OFFLINE" not in os.environ:
        extra_env = {"HF_HUB_OFFLINE": "1", **(extra_env or {})}  # nothing fetched on the side
    order = [c.card for c in card_plan.cards]
    secrets_env = {**os.environ, **(extra_env or {})}
    try:
        ensure_writable(log_dir)
    except OSError as exc:
        raise PermissionError(exc.errno, f"log_dir={str(log_dir)!r} is not a writable folder "
                                         f"({exc.strerror})", str(log_dir)) from None

    def label(card: int) -> str:  # the card as the device tools number it
        return "cpu" if backend.kind == "cpu" else f"{backend.kind}:{card}"

    threads = _threads_per_worker(backend, len(card_plan.to_run))
    rows = {p.card: _first_row(p, label(p.card), log_dir) for p in card_plan.cards}
    total = len(order)
    raws: dict[int, dict] = {}

    last_notified = [0.0]

    def notify(card=None, status=None, running=True, stopped=False):
        if on_progress is None:
            return
        last_notified[0] = time.monotonic()
        done = sum(1 for r in rows.values() if r["status"] not in ("running", *STOPPED_STATUSES))
        elapsed = {w.card: round(time.time() - w.started_at, 1) for w in workers.values()
                   if rows[w.card]["status"] == "running"}
        try:
            on_progress(GridProgress(_frame(rows, order), done, total, card, status, elapsed, running, stopped))
        except Exception as exc:  # a broken display must not abandon running workers
            warnings.warn(f"run_grid: on_progress failed ({type(exc).__name__}: {exc}); "
                          "the grid goes on", RuntimeWarning, stacklevel=2)

    def done(child: Child, _code: int, timed_out: bool) -> None:
        worker = workers[child.pid]
        if worker.cann_dir is not None and not worker.cann_shared:  # its own CANN logs too
            for plog in sorted(worker.cann_dir.rglob("*.log")):
                scrub_log(plog, secrets_env)
        rows[worker.card], raws[worker.card] = _row_for(
            worker, timed_out, timeout_s, label(worker.card), secrets_env)
        notify(worker.card, rows[worker.card]["status"])

    def result() -> GridResult:
        consistent, differing, _ = consistency(_frame(rows, order))
        outcomes = {c: raws[c].get("outcome") for c in order if c in raws}
        return GridResult(
            rows=[dict(rows[c]) for c in order], consistent=consistent, differing_cards=differing,
            log_dir=log_dir, wall_s=round(time.monotonic() - t0, 3), timeout_s=timeout_s,
            provenance=Provenance(device=backend.kind), plan=card_plan,
            config=InferenceConfig.from_dict(scrub_obj(inference, secrets_env)),
            attention=plan.attention, notes=list(plan.notes),  # scrubbed by the plan, which the notebook prints
            # the model's folder name and path, scrubbed as the config is (a worker's secret too)
            memory=from_mapping(MemoryPlan, scrub_obj(to_mapping(plan.memory), secrets_env)) if plan.memory else None,
            outputs={str(c): CardOutputs(out.get("single_output"), out.get("batch_outputs"))
                     for c, out in outcomes.items() if out},
            diagnoses={str(c): Triage.from_dict(raws[c]["diagnosis"]) for c in order
                       if c in raws and raws[c].get("diagnosis")})

    workers: dict[int, _Worker] = {}  # by pid
    # Interrupted (KeyboardInterrupt in the notebook, SIGTERM in the CLI): the group leaves
    # no worker behind, and no secret in what they wrote.
    with ChildGroup(environ=secrets_env) as group:
        try:
            for p in card_plan.cards:
                if not p.run:
                    continue
                spec = {"card": p.card, "device_kind": backend.kind, "num_threads": threads,
                        "inference": inference}
                try:
                    worker = _launch(group, backend, p.card, spec, log_dir, timeout_s, extra_env, secrets_env)
                except OSError as exc:
                    rows[p.card].update(status="failed", cpu_fallback_warnings=0,
                                        error=f"could not start the worker: {type(exc).__name__}: {exc}")
                else:
                    workers[worker.child.pid] = worker
            notify()

            def tick() -> None:  # the seconds each card has run, said every second
                if time.monotonic() - last_notified[0] >= 1.0:
                    notify()

            group.wait(done, poll_interval_s=0.1, kill_grace_s=kill_grace_s, on_tick=tick)
        except KeyboardInterrupt as exc:
            # Stopped: the cards that finished are kept; the caller finds them on the exception.
            # A card still running is stopped; one whose worker never started says so.
            launched = {worker.card for worker in workers.values()}
            for card, row in rows.items():
                if row["status"] == "running" and card in launched:
                    row.update(status="interrupted", error="stopped before this card finished")
                elif row["status"] == "running":
                    row.update(status="not-started", error="stopped before this card's worker started")
            exc.partial = result()
            notify(running=False, stopped=True)
            raise
    notify(running=False)
    return result()
