"""What a training launch leaves behind: the metrics file (one JSON line per optimizer step,
rank 0's) and what it sums up to, rank 0's result file, and the launch's :class:`TrainResult`
(its verdict: :func:`hyport_lib.train.stage.summarize`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.proof.swap import AttentionProof
from hyport_lib.results import Provenance
from hyport_lib.train.held_answers import HeldAnswers
from hyport_lib.train.output_dir import Checkpoint
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.triage import Triage
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.typed_records import from_mapping, to_mapping

THROUGHPUT_DEFINITION = ("tokens/s/p = global batch × sequence length / (cards × seconds per step); "
                         "the first {warmup} step(s) of each process are left out (warm-up: "
                         "operator compilation on an NPU), and so are the seconds spent writing "
                         "checkpoints")


@dataclass
class StepMetrics:
    """One line of the metrics file: one optimizer step as rank 0 logged it (a non-finite
    loss or gradient norm is null, its flag says which; the tokens are summed over ranks)."""

    step: int = 0
    loss: Optional[float] = None
    nonfinite_loss: bool = False
    real_tokens: int = 0
    tokens: int = 0
    step_s: Optional[float] = None  # from the end of the step before: loading, logging, saving inside
    save_s: Optional[float] = None  # the checkpoint saved inside this step
    world_size: Optional[int] = None
    tokens_per_s_per_card: Optional[float] = None
    real_tokens_per_s_per_card: Optional[float] = None
    skipped: bool = False  # by the optimizer (overflow)
    skipped_total: int = 0
    peak_memory_mb: Optional[float] = None
    memory_source: Optional[str] = None
    epoch: Optional[float] = None
    restart: int = 0
    process_step: Optional[int] = None  # of the process that wrote it: a restart or resume warms up again
    learning_rate: Optional[float] = None
    grad_norm: Optional[float] = None
    nonfinite_grad_norm: bool = False
    logged_loss: Optional[float] = None
    time: Optional[float] = None


def read_metrics(path: os.PathLike) -> list[StepMetrics]:
    """Every complete line of a metrics file (a half-written last line is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue  # blank, or being written right now
        if isinstance(value, dict) and isinstance(value.get("step"), int):
            records.append(from_mapping(StepMetrics, value))
    return records


def truncate_metrics(path: os.PathLike, last_step: int) -> int:
    """Keep only lines up to ``last_step`` (a resume continues from there); how many were kept."""
    path = Path(path)
    kept = [r for r in read_metrics(path) if r.step <= last_step]
    if path.exists() or kept:
        atomic_write_text(path, "".join(json.dumps(to_mapping(r)) + "\n" for r in kept))
    return len(kept)


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class MetricsSummary:
    """What a metrics file says about a run."""

    steps: int = 0
    first_step: Optional[int] = None
    last_step: Optional[int] = None
    first_loss: Optional[float] = None
    last_loss: Optional[float] = None
    #: The step of ``last_loss`` (the last finite loss): before ``last_step`` when the
    #: run ended on non-finite losses.
    last_loss_step: Optional[int] = None
    mean_loss: Optional[float] = None
    finite_losses: int = 0
    mean_step_s: Optional[float] = None
    #: seconds of the measured steps spent writing checkpoints (left out of the figures)
    checkpoint_s: float = 0.0
    tokens_per_s_per_card: Optional[float] = None
    real_tokens_per_s_per_card: Optional[float] = None
    warmup_steps: int = 0
    measured_steps: int = 0
    nonfinite_loss_steps: list[int] = field(default_factory=list)
    nonfinite_grad_norm_steps: list[int] = field(default_factory=list)
    skipped_steps: int = 0
    peak_memory_mb: Optional[float] = None
    memory_source: Optional[str] = None
    repeated_steps: list[int] = field(default_factory=list)
    missing_steps: list[int] = field(default_factory=list)
    restarts: int = 0
    throughput_definition: str = ""


def summarize_metrics(records: list[StepMetrics], warmup_steps: int = 2) -> MetricsSummary:
    out = MetricsSummary(warmup_steps=warmup_steps,
                         throughput_definition=THROUGHPUT_DEFINITION.format(warmup=warmup_steps))
    if not records:
        return out
    steps = [r.step for r in records]
    out.steps = len(set(steps))
    out.first_step, out.last_step = min(steps), max(steps)
    out.repeated_steps = sorted({s for s in steps if steps.count(s) > 1})
    out.missing_steps = sorted(set(range(out.first_step, out.last_step + 1)) - set(steps))
    finite_rows = [r for r in records if finite(r.loss)]
    finite_losses = [r.loss for r in finite_rows]
    out.first_loss = finite_losses[0] if finite_losses else None
    out.last_loss = finite_losses[-1] if finite_losses else None
    out.last_loss_step = finite_rows[-1].step if finite_rows else None
    out.mean_loss = statistics.fmean(finite_losses) if finite_losses else None
    out.finite_losses = len(finite_losses)
    out.nonfinite_loss_steps = [r.step for r in records if r.nonfinite_loss]
    out.nonfinite_grad_norm_steps = [r.step for r in records if r.nonfinite_grad_norm]
    out.skipped_steps = sum(1 for r in records if r.skipped)
    memory = [r.peak_memory_mb for r in records if finite(r.peak_memory_mb)]
    out.peak_memory_mb = max(memory) if memory else None
    out.memory_source = next((r.memory_source for r in records if r.memory_source), None)
    out.restarts = max((r.restart for r in records), default=0)
    measured = [r for r in records if (r.process_step or r.step) > warmup_steps
                and finite(r.step_s) and r.step_s > 0]
    if not measured:  # too few steps: keep a figure, and say which steps it covers
        measured = [r for r in records if finite(r.step_s) and r.step_s > 0]
        out.warmup_steps = 0
        out.throughput_definition = THROUGHPUT_DEFINITION.format(warmup=0) + \
            " (too few steps to leave any out)"
    out.measured_steps = len(measured)
    if measured:
        # Training seconds: a checkpoint written between two steps is not training.
        busy = [max(r.step_s - (r.save_s if finite(r.save_s) else 0.0), 1e-9) for r in measured]
        out.checkpoint_s = round(sum(r.step_s for r in measured) - sum(busy), 6)
        out.mean_step_s = sum(busy) / len(measured)
        cards = [r.world_size or 1 for r in measured]
        card_seconds = sum(b * c for b, c in zip(busy, cards))
        tokens = sum(r.tokens for r in measured)
        real = sum(r.real_tokens for r in measured)
        out.tokens_per_s_per_card = tokens / card_seconds if card_seconds else None
        out.real_tokens_per_s_per_card = real / card_seconds if card_seconds else None
    return out


def loss_span(summary: MetricsSummary, digits: int = 4) -> Optional[str]:
    """``"6.7093 → 6.7093 (last finite: step 1 of 6)"``; None when no finite loss was logged."""
    first, last = summary.first_loss, summary.last_loss
    if first is None or last is None:
        return None
    text = f"{first:.{digits}f} → {last:.{digits}f}"
    at, end = summary.last_loss_step, summary.last_step
    if at is not None and end is not None and at != end:
        text += f" (last finite: step {at} of {end})"
    return text


@dataclass
class TrainProgress:
    """Passed to ``on_progress`` at every poll of the launcher (about twice a second) from
    the start of torchrun, and once more when the run ended (``running`` False)."""

    records: list[StepMetrics]
    total_steps: Optional[int]
    elapsed_s: float
    running: bool = True
    ranks: int = 0  # processes torchrun starts on this node
    device: str = ""  # npu | cuda | cpu
    stopped: bool = False  # ended by an interrupt (Kernel → Interrupt, a Stop button, a signal)
    waiting_for: list[int] = field(default_factory=list)  # nodes not joined yet (nnodes > 1)

    @property
    def provenance(self) -> Optional[Provenance]:
        return Provenance(device=self.device) if self.device else None

    @property
    def done_steps(self) -> int:
        return max((r.step for r in self.records), default=0)


@dataclass
class NodeRow:
    """One node of the job, as node 0's record shows it."""

    node_rank: int = 0
    host: str = ""
    ranks: list[int] = field(default_factory=list)
    status: str = ""  # ok | failed | ... | "no report" (its launcher never said)
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    log_path: str = ""
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    #: how this node's versions differ from node 0's ("CANN 8.0.RC3 -> 8.1.RC1"); [] when the same
    versions_differ: list[str] = field(default_factory=list)


@dataclass
class WorkerResult:
    """What rank 0 writes into output_dir (:data:`~hyport_lib.train.output_dir.RESULT_FILE`)
    when its training ended well."""

    status: str = ""
    #: the Trainer's own figures (``trainer.train().metrics``: which, transformers decides)
    train_metrics: dict[str, float] = field(default_factory=dict)
    global_step: Optional[int] = None
    final_dir: Optional[str] = None
    resumed_from: Optional[str] = None
    resumed_step: Optional[int] = None
    world_size: Optional[int] = None
    samples: Optional[int] = None
    rows: Optional[int] = None
    trainable_parameters: Optional[int] = None
    restart: Optional[int] = None
    held_answers: Optional[HeldAnswers] = None
    worker_s: Optional[float] = None

    @property
    def trainer_loss(self) -> Optional[float]:
        """The Trainer's train_loss: over the steps of its own process only (not those
        before a resume), a non-finite step loss counted as 0."""
        return self.train_metrics.get("train_loss")


@dataclass
class TrainResult:
    """One launch: its plan, what rank 0 logged and wrote (``worker``: None when it wrote
    nothing), the checkpoints, and the hand-over to stage 05 (``final_dir``: None when no
    final weights were written, ``last_checkpoint``: the last complete one, ``model_path``:
    the model it started from)."""

    status: str  # ok | failed | timeout | interrupted
    exit_code: Optional[int] = None
    wall_s: float = 0.0
    reason: Optional[str] = None
    plan: Optional[LaunchPlan] = None  # None in an odd record only: its show hooks read it so
    summary: MetricsSummary = field(default_factory=MetricsSummary)
    worker: Optional[WorkerResult] = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    final_dir: Optional[str] = None
    last_checkpoint: Optional[str] = None
    model_path: Optional[str] = None
    metrics: list[StepMetrics] = field(default_factory=list)
    log_tail: str = ""
    #: What :func:`hyport_lib.triage.triage` found in the logs of a run that did not end
    #: well; None when the run succeeded.
    diagnosis: Optional[Triage] = None
    provenance: Optional[Provenance] = None
    #: nnodes > 1, node 0's record: a row per node of the job; [] on one node and on nodes > 0
    nodes: list[NodeRow] = field(default_factory=list)
    #: the job's nodes and this one's rank, at the top of the record: stage 05's hand-over
    #: (:class:`hyport_lib.results.TrainedWeights`) reads them there (a node > 0 checks nothing)
    nnodes: int = 1
    node_rank: int = 0
    #: nnodes > 1: this node's host, and what the job's nodes said beside the table
    host: str = ""
    node_notes: list[str] = field(default_factory=list)

    @property
    def held_answers(self) -> Optional[HeldAnswers]:
        return self.worker.held_answers if self.worker is not None else None

    @property
    def trainer_loss(self) -> Optional[float]:
        return self.worker.trainer_loss if self.worker is not None else None

    @property
    def trainer_loss_differs(self) -> bool:
        """The Trainer's own train_loss (:attr:`WorkerResult.trainer_loss`) is not the mean of the
        logged losses."""
        loss, mean = self.trainer_loss, self.summary.mean_loss
        return loss is not None and (mean is None or abs(float(loss) - mean) > 5e-5)


def final_weights(worker: Optional[WorkerResult]) -> Optional[str]:
    """The final folder rank 0 wrote, when it holds weights."""
    final = worker.final_dir if worker is not None else None
    return final if final and _has_weights(Path(final)) else None


def last_complete(checkpoints: list[Checkpoint]) -> Optional[str]:
    complete = [c for c in checkpoints if c.complete]
    return str(complete[-1].path) if complete else None


def proof_summary(proof: Optional[AttentionProof]) -> Optional[str]:
    """The attention proof before launch in a few words (None when no swap was asked for):
    ``PASS: max |Δ logits| 3.0e-07, same gradient set (CPU, float32)``."""
    if proof is None or not proof.verdict:
        return None
    where = proof.source or "CPU"
    if proof.verdict != "PASS":
        return f"{proof.verdict} ({where}): {proof.reason or 'no reason recorded'}"
    delta = proof.max_abs_logits
    figure = f"max |Δ logits| {delta:.1e}" if isinstance(delta, (int, float)) else "logits equal"
    return f"PASS: {figure}, same gradient set ({where}{', cached' if proof.cached else ''})"


def _has_weights(folder: Path) -> bool:
    return folder.is_dir() and (any(folder.glob("*.safetensors"))
                                or (folder / "model.safetensors.index.json").is_file())
