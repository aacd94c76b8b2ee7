"""Two (or more) recorded runs side by side: what changed between the CPU emulation run and
an NPU run, between two profiles, between yesterday and today.

A run is a folder of stage results: an interactive run kept under ``history/<run-id>/``
(:func:`hyport_lib.results.history_dir`) or a report run's ``<run>/results/``. This module
reads the records as written (the stage packages sit above it and are not imported) and
returns tidy DataFrames in a :class:`Comparison`; :mod:`hyport_lib.workbook.compare_show`
renders them (tables, the overlaid loss as a PNG, an offline page).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pandas as pd

from hyport_lib.results import HISTORY_DIR, UnreadableResult, history_dir, read_result

#: A stage's result file: ``04_train.json``.
_STAGE_FILE = re.compile(r"^(\d{2}_[a-z0-9_]+)\.json$")
#: The report runner's results folder inside a run folder (hyport_lib.report.run.RESULTS_DIR,
#: which this utility layer may not import).
_REPORT_RESULTS = "results"
#: The folder of ``outputs/`` holding interactive results, logs and history: not a report run.
_INTERACTIVE = "interactive"
#: What a cell says when a run has no value there.
MISSING = "–"


@dataclass(frozen=True)
class Run:
    """A folder of stage results. ``kind``: ``interactive`` (one stage run kept under
    ``history/``) or ``report`` (a ``hyport report`` run's results)."""

    id: str
    kind: str
    folder: Path  # holds <stage>.json
    stages: tuple[str, ...]

    @property
    def root(self) -> Path:
        """The run's own folder: a report run's (its index, ``results/``), or the history one."""
        return self.folder.parent if self.kind == "report" and self.folder.name == _REPORT_RESULTS else self.folder

    def record(self, stage: str) -> dict:
        """The stage's record as written; ValueError naming the file when unreadable."""
        path = self.folder / f"{stage}.json"
        # The file by its name only: the message lands in compare.html, which may be sent on.
        try:
            return read_result(path)
        except FileNotFoundError:
            raise ValueError(f"run {self.id}: no {path.name}") from None
        except UnreadableResult as exc:
            reason = exc.reason.replace(str(path), path.name)
            raise ValueError(f"run {self.id}: {path.name} is not a result ({reason})") from None


def default_outputs() -> Path:
    """``outputs/`` of the checkout: the parent of the interactive folder (where a report
    started in the checkout writes its runs)."""
    return history_dir().parent.parent


def _stages_in(folder: Path) -> tuple[str, ...]:
    if not folder.is_dir():
        return ()
    return tuple(sorted(m.group(1) for p in folder.iterdir() if (m := _STAGE_FILE.match(p.name)) and p.is_file()))


def list_runs(outputs: Optional[Path] = None) -> list[Run]:
    """Every recorded run, newest first (the ids begin with their local time): each report
    run folder under ``outputs`` (the report's output root; default
    :func:`default_outputs`) and the interactive runs where every interactive run is kept,
    :func:`history_dir` (a report never writes into a history)."""
    history = history_dir()
    outputs = Path(outputs) if outputs else default_outputs()
    runs = []
    for folder in sorted(history.iterdir()) if history.is_dir() else ():
        if stages := _stages_in(folder):
            runs.append(Run(folder.name, "interactive", folder, stages))
    for folder in sorted(outputs.iterdir()) if outputs.is_dir() else ():
        if folder.name != _INTERACTIVE and (stages := _stages_in(folder / _REPORT_RESULTS)):
            runs.append(Run(folder.name, "report", folder / _REPORT_RESULTS, stages))
    return sorted(runs, key=lambda r: r.id, reverse=True)


def find_run(ref: Any, outputs: Optional[Path] = None) -> Run:
    """A run from a folder (a report run folder, its ``results/``, a history run folder)
    or a run id (or the start of one) under ``outputs``.

    Raises:
        ValueError: one line naming ``ref`` and the runs there are.
    """
    if isinstance(ref, Run):
        return ref
    path = Path(str(ref)).expanduser()
    if path.is_dir():
        path = path.resolve()  # absolute, as the records' own paths are (a run's folders compare equal)
        if stages := _stages_in(path / _REPORT_RESULTS):
            return Run(path.resolve().name, "report", path / _REPORT_RESULTS, stages)
        if stages := _stages_in(path):
            folder = path.resolve()
            if folder.parent.name == HISTORY_DIR:
                return Run(folder.name, "interactive", path, stages)
            name = folder.parent.name if folder.name == _REPORT_RESULTS else folder.name
            return Run(name, "report", path, stages)
        raise ValueError(f"run {ref}: the folder holds no stage result (NN_stage.json, or results/NN_stage.json)")
    runs = list_runs(outputs)
    matches = [r for r in runs if r.id == str(ref)] or [r for r in runs if r.id.startswith(str(ref))]
    if len(matches) == 1:
        return matches[0]
    where = Path(outputs) if outputs else default_outputs()
    known = ", ".join(r.id for r in runs[:6]) + (" …" if len(runs) > 6 else "") or "none"
    what = "matches several runs" if matches else "no such run folder or run id"
    raise ValueError(f"run {ref!r}: {what} under {where} or {history_dir()} (runs: {known})")


def run_label(run: Run, record: dict) -> str:
    """``<run id> (CPU (not an NPU measurement))``: the run and where its figures came from,
    so a CPU or emulated run is never read as an NPU one."""
    provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    return f"{run.id} ({provenance.get('label') or 'provenance not recorded'})"


@dataclass
class Comparison:
    """Runs side by side; every frame is tidy (one row per run and thing) except
    :attr:`attention` and :attr:`cards`, whose columns are the runs (what differs)."""

    runs: list[Run]
    stages: list[str]
    #: stage, run, label, verdict, summary, recorded_at (every stage of every run)
    overview: pd.DataFrame
    #: stage, key, run, value (the index figures of every stage)
    headlines: pd.DataFrame
    #: run, label, step, loss (04's metrics per step, finite losses only)
    losses: pd.DataFrame
    #: case, layout, dtype, mask, backend and per run its verdict (column: the run id) and
    #: what computed it (``<run> source``): 02's cases whose verdict differs among the runs
    #: that have the backend, a case missing there included
    attention: pd.DataFrame
    #: run, backend, source, cases, verdicts: 02's backends that not every run has
    attention_unshared: pd.DataFrame
    #: card and, per run, ``<run> status`` / ``<run> agrees`` / ``<run> tokens/s`` (03)
    cards: pd.DataFrame
    #: run, label, stage, measure, tokens_per_s (03 and 04)
    throughput: pd.DataFrame
    #: stage, parameter, run, value (as text): the parameters each record holds
    parameters: pd.DataFrame
    #: runs that lack a stage the others have, unreadable records
    notes: list[str] = field(default_factory=list)


def compare_runs(refs: Sequence[Any], *, stages: Optional[Iterable[str]] = None,
                 outputs: Optional[Path] = None) -> Comparison:
    """Compare the runs ``refs`` (ids or folders, see :func:`find_run`), on ``stages``
    (by number, name or id, as ``hyport report --only`` takes them; default: every stage
    any of them recorded).

    Raises:
        ValueError: fewer than two runs, the same run twice, a run that cannot be found, or
            a stage none of them recorded.
    """
    runs = [find_run(ref, outputs) for ref in refs]
    if len(runs) < 2:
        raise ValueError(f"compare: name two runs or more (got {len(runs)})")
    if len({r.folder.resolve() for r in runs}) < len(runs):
        raise ValueError(f"compare: the same run twice ({', '.join(r.id for r in runs)})")
    recorded = sorted({s for r in runs for s in r.stages})
    wanted = _pick_stages(stages, recorded) if stages else recorded
    notes, records = [], {}
    for run in runs:
        for stage in wanted:
            if stage not in run.stages:
                notes.append(f"run {run.id} has no {stage} result")
                continue
            try:
                records[run.id, stage] = run.record(stage)
            except ValueError as exc:
                notes.append(str(exc))
    by_stage = {s: [(r, records[r.id, s]) for r in runs if (r.id, s) in records] for s in wanted}
    attention = by_stage.get("02_attention", [])
    return Comparison(runs, wanted, _overview(by_stage), _headlines(by_stage),
                      loss_curves(by_stage.get("04_train", [])),
                      attention_differences(attention), attention_unshared(attention),
                      card_table(by_stage.get("03_inference", [])),
                      _throughput(by_stage), _parameters(by_stage, notes), notes)


def _pick_stages(wanted: Iterable[str], recorded: Sequence[str]) -> list[str]:
    """The stage ids of ``wanted`` (``04``, ``4``, ``train`` or ``04_train``, as
    :func:`hyport_lib.stages.select_stages` reads ``--only``) among ``recorded``.

    Raises:
        ValueError: one line naming the stages no run recorded, and those there are.
    """
    known = {}
    for stage in recorded:
        number, _, name = stage.partition("_")
        known.update({number: stage, name: stage, stage: stage})
    wanted = [w.strip() for w in wanted if w.strip()]
    unknown = [w for w in wanted if w not in known and w.zfill(2) not in known]
    if unknown or not wanted:
        raise ValueError(f"--stage {', '.join(unknown) or repr('')}: not a stage these runs recorded "
                         f"(recorded: {', '.join(recorded) or 'none'})")
    return sorted({known.get(w) or known[w.zfill(2)] for w in wanted})


def _overview(by_stage: dict[str, list[tuple[Run, dict]]]) -> pd.DataFrame:
    rows = [{"stage": stage, "run": run.id, "label": run_label(run, rec), "verdict": rec.get("verdict"),
             "summary": rec.get("summary", ""), "recorded_at": rec.get("recorded_at", "")}
            for stage, pairs in by_stage.items() for run, rec in pairs]
    return pd.DataFrame(rows, columns=["stage", "run", "label", "verdict", "summary", "recorded_at"])


def _headlines(by_stage: dict[str, list[tuple[Run, dict]]]) -> pd.DataFrame:
    rows = [{"stage": stage, "key": key, "run": run.id, "value": value}
            for stage, pairs in by_stage.items() for run, rec in pairs
            for key, value in (rec.get("headline") if isinstance(rec.get("headline"), dict) else {}).items()]
    return pd.DataFrame(rows, columns=["stage", "key", "run", "value"])


def _parameters(by_stage: dict[str, list[tuple[Run, dict]]], notes: list[str]) -> pd.DataFrame:
    rows = []
    for stage, pairs in by_stage.items():
        for run, rec in pairs:
            params = rec.get("params") if isinstance(rec.get("params"), dict) else {}
            if not params:  # an older record: "–" under every parameter would read as a difference
                notes.append(f"run {run.id}: its {stage} record holds no parameters")
            rows += [{"stage": stage, "parameter": name, "run": run.id, "value": _value_text(value, run)}
                     for name, value in params.items()]
    return pd.DataFrame(rows, columns=["stage", "parameter", "run", "value"])


def _value_text(value: Any, run: Run) -> str:
    """A parameter as one comparable text: a path inside the run's folder as ``<run>/…``
    (as the report's index shows it: no local folder on a page that is sent on, and two
    runs' own folders compare equal), other strings as they are, the rest as JSON (a list
    ``["float16"]`` and a text ``float16`` stay apart)."""
    if isinstance(value, str) and os.path.isabs(value) and Path(value).is_relative_to(run.root):
        return Path("<run>", Path(value).relative_to(run.root)).as_posix()
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _data(record: dict) -> dict:
    return record.get("data") if isinstance(record.get("data"), dict) else {}


def _number(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def loss_curves(pairs: Sequence[tuple[Run, dict]]) -> pd.DataFrame:
    """run, label, step, loss of each stage-04 record (its ``data.metrics``)."""
    rows = [{"run": run.id, "label": run_label(run, rec), "step": m["step"], "loss": loss}
            for run, rec in pairs for m in _data(rec).get("metrics") or []
            if isinstance(m, dict) and isinstance(m.get("step"), int) and (loss := _number(m.get("loss"))) is not None]
    return pd.DataFrame(rows, columns=["run", "label", "step", "loss"])


_CASE_KEYS = ("case", "layout", "dtype", "mask", "backend")
#: hyport's CPU emulation of npu_fusion_attention in a stage-02 backend's name: ``npu-emulated``,
#: ``flash-api (npu-emulated)``; the same name with ``npu`` is the same contract on an NPU.
_EMULATED, _ON_NPU = "npu-emulated", "npu"


@dataclass
class _AttentionRun:
    run: Run
    #: case key (backend: as matched across runs) -> (verdict, what computed it)
    cases: dict[tuple, tuple[Any, str]]


def _attention_runs(pairs: Sequence[tuple[Run, dict]]) -> list[_AttentionRun]:
    """Each run's stage-02 rows by case key. An emulated backend is matched with its NPU
    counterpart where no run recorded both (the CPU emulation run beside an NPU run): the
    same cases, computed by the emulation in one run and by the NPU in the other."""
    rows = {run.id: [r for r in _data(rec).get("rows") or [] if isinstance(r, dict)] for run, rec in pairs}
    recorded = [{r.get("backend") for r in run_rows} for run_rows in rows.values()]
    every = set().union(*recorded) if recorded else set()
    counterpart = {b: b.replace(_EMULATED, _ON_NPU) for b in every if isinstance(b, str) and _EMULATED in b}
    matched = {b: npu for b, npu in counterpart.items()
               if npu in every and not any({b, npu} <= backends for backends in recorded)}
    found = []
    for run, _ in pairs:
        cases = {}
        for row in rows[run.id]:
            key = tuple(row.get(k) for k in _CASE_KEYS[:-1]) + (matched.get(row.get("backend"), row.get("backend")),)
            cases[key] = (row.get("verdict"), str(row.get("source") or row.get("backend")))
        found.append(_AttentionRun(run, cases))
    return found


def attention_differences(pairs: Sequence[tuple[Run, dict]]) -> pd.DataFrame:
    """The stage-02 cases (by case, layout, dtype, mask, backend) whose verdict is not the
    same in the runs that have the backend, each run's verdict (:data:`MISSING`: no such
    row) and what computed it (``<run> source``: an emulation run paired with an NPU run
    says which is which). Backends that not every run has: :func:`attention_unshared`."""
    runs = _attention_runs(pairs)
    shared = set.intersection(*[{k[-1] for k in a.cases} for a in runs]) if runs else set()
    rows = []
    for key in dict.fromkeys(k for a in runs for k in a.cases if k[-1] in shared):
        seen = {a.run.id: a.cases.get(key, (MISSING, MISSING)) for a in runs}
        if len({verdict for verdict, _ in seen.values()}) > 1:
            rows.append({**dict(zip(_CASE_KEYS, key)),
                         **{col: value for i, (verdict, source) in seen.items()
                            for col, value in ((i, verdict), (f"{i} source", source))}})
    columns = [*_CASE_KEYS, *[col for a in runs for col in (a.run.id, f"{a.run.id} source")]]
    return pd.DataFrame(rows, columns=columns)


def attention_unshared(pairs: Sequence[tuple[Run, dict]]) -> pd.DataFrame:
    """run, backend, source, cases, verdicts (``PASS 45, WARN 2``) of each stage-02 backend
    that not every run has (the NPU kernel in an NPU run beside a CPU one): not a difference
    of verdicts, a backend the other run could not run."""
    runs = _attention_runs(pairs)
    backends = [{k[-1] for k in a.cases} for a in runs]
    rows = []
    for a, own in zip(runs, backends):
        for backend in sorted(b for b in own if not all(b in other for other in backends)):
            mine = [value for k, value in a.cases.items() if k[-1] == backend]
            counts = Counter(str(verdict) for verdict, _ in mine)
            rows.append({"run": a.run.id, "backend": backend,
                         "source": ", ".join(sorted({source for _, source in mine})), "cases": len(mine),
                         "verdicts": ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))})
    return pd.DataFrame(rows, columns=["run", "backend", "source", "cases", "verdicts"])


def _reference_hash(rows: list[dict]) -> Optional[str]:
    """The most common output hash of the cards that finished (ties: the lowest card's), as
    the grid itself judges agreement."""
    hashes = [r.get("output_hash") for r in sorted(rows, key=lambda r: r.get("card") or 0)
              if r.get("status") == "ok" and r.get("output_hash")]
    if not hashes:
        return None
    counts = Counter(hashes)
    top = max(counts.values())
    return next(h for h in hashes if counts[h] == top)


def card_table(pairs: Sequence[tuple[Run, dict]]) -> pd.DataFrame:
    """Stage 03 per card: each run's status, whether the card agrees with its run's
    reference output, its tokens/s; and whether the cards answered the same across runs."""
    per_run = {}
    for run, rec in pairs:
        rows = [r for r in _data(rec).get("rows") or [] if isinstance(r, dict) and r.get("card") is not None]
        reference = _reference_hash(rows)
        per_run[run.id] = {int(r["card"]): {
            "status": r.get("status"),
            "agrees": (r.get("output_hash") == reference) if r.get("status") == "ok" and reference else None,
            "tokens/s": _number(r.get("tokens_per_s")), "hash": r.get("output_hash")} for r in rows}
    ids = list(per_run)
    columns = ["card", *[f"{i} {what}" for i in ids for what in ("status", "agrees", "tokens/s")], "same output"]
    rows = []
    for card in sorted({c for cards in per_run.values() for c in cards}):
        row: dict[str, Any] = {"card": card}
        for i in ids:
            seen = per_run[i].get(card, {})
            row.update({f"{i} status": seen.get("status", MISSING), f"{i} agrees": seen.get("agrees"),
                        f"{i} tokens/s": seen.get("tokens/s")})
        # Across runs only when two runs or more have the card (None: nothing to compare).
        hashes = [per_run[i][card].get("hash") for i in ids if card in per_run[i]]
        row["same output"] = len(set(hashes)) == 1 and None not in hashes if len(hashes) > 1 else None
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _median(values: Iterable[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _throughput(by_stage: dict[str, list[tuple[Run, dict]]]) -> pd.DataFrame:
    rows = []
    for run, rec in by_stage.get("03_inference", []):
        ok = [r for r in _data(rec).get("rows") or [] if isinstance(r, dict) and r.get("status") == "ok"]
        for measure, key in (("tokens/s incl. prefill (median of cards)", "tokens_per_s"),
                             ("decode tokens/s (median of cards)", "decode_tokens_per_s")):
            rows.append({"run": run.id, "label": run_label(run, rec), "stage": "03_inference",
                         "measure": measure, "tokens_per_s": _median(_number(r.get(key)) for r in ok)})
    for run, rec in by_stage.get("04_train", []):
        summary = _data(rec).get("summary") if isinstance(_data(rec).get("summary"), dict) else {}
        for measure, key in (("tokens/s per card", "tokens_per_s_per_card"),
                             ("real tokens/s per card (no padding)", "real_tokens_per_s_per_card")):
            rows.append({"run": run.id, "label": run_label(run, rec), "stage": "04_train",
                         "measure": measure, "tokens_per_s": _number(summary.get(key))})
    return pd.DataFrame(rows, columns=["run", "label", "stage", "measure", "tokens_per_s"])
