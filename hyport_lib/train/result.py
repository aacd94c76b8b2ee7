"""What a training launch leaves behind (its verdict: :func:`hyport_lib.train.stage.summarize`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.proof.swap import AttentionProof
from hyport_lib.results import Provenance
from hyport_lib.train.checkpoints import Checkpoint
from hyport_lib.train.held_answers import HeldAnswers
from hyport_lib.train.metrics import MetricsSummary, StepMetrics
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.triage import Triage

#: What rank 0 writes into output_dir at the end of a run (read by the launcher).
RESULT_FILE = "train_result.json"


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

    @property
    def provenance(self) -> Optional[Provenance]:
        return Provenance(device=self.device) if self.device else None

    @property
    def done_steps(self) -> int:
        return max((r.step for r in self.records), default=0)


@dataclass
class WorkerResult:
    """What rank 0 writes into output_dir (:data:`RESULT_FILE`) when its training ended well."""

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
    plan: LaunchPlan = None
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
