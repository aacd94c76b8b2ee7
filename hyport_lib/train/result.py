"""What a training launch leaves behind (its verdict: :func:`hyport_lib.train.stage.summarize`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.results import Provenance, TrainedWeights
from hyport_lib.train.metrics import MetricsSummary
from hyport_lib.utils.records import from_mapping

#: What rank 0 writes into output_dir at the end of a run (read by the launcher).
RESULT_FILE = "train_result.json"


@dataclass
class TrainProgress:
    """Passed to ``on_progress`` at every poll of the launcher (about twice a second) from
    the start of torchrun, and once more when the run ended (``running`` False)."""

    records: list[dict]
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
        return max((r["step"] for r in self.records), default=0)


@dataclass
class TrainResult:
    status: str  # ok | failed | timeout
    exit_code: Optional[int]
    wall_s: float
    plan: dict
    metrics: list[dict]
    summary: MetricsSummary
    worker: dict = field(default_factory=dict)
    checkpoints: list[dict] = field(default_factory=list)
    reason: Optional[str] = None
    log_tail: str = ""
    provenance: Optional[Provenance] = None
    #: What :func:`hyport_lib.triage.triage` found in the logs of a run that did not end
    #: well (``Triage.to_dict()``); None when the run succeeded.
    diagnosis: Optional[dict] = None

    @property
    def final_dir(self) -> Optional[str]:
        final = self.worker.get("final_dir")
        if final and _has_weights(Path(final)):
            return final
        return None

    @property
    def last_checkpoint(self) -> Optional[str]:
        complete = [c for c in self.checkpoints if c["complete"]]
        return complete[-1]["path"] if complete else None

    def handover(self) -> TrainedWeights:
        """What stage 05 checks: the final weights, the last checkpoint, the starting model."""
        return TrainedWeights(self.final_dir, self.last_checkpoint, self.plan.get("model_path"))

    def to_dict(self) -> dict:
        """The result without its verdict (:func:`hyport_lib.train.stage.result_data` adds it)."""
        return {
            "status": self.status, "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3),
            "reason": self.reason, "plan": self.plan,
            "summary": self.summary.to_dict(), "worker": self.worker,
            "checkpoints": self.checkpoints, **self.handover().to_dict(), "metrics": self.metrics,
            "log_tail": self.log_tail, "diagnosis": self.diagnosis,
            "provenance": self.provenance.to_dict() if self.provenance else None,
        }

    @classmethod
    def from_dict(cls, data) -> "TrainResult":
        """The result as :meth:`to_dict` recorded it (the verdict and the folders derived again); an
        older or odd record gives the defaults where it differs (:mod:`hyport_lib.utils.records`)."""
        return from_mapping(cls, data)


def proof_summary(proof) -> Optional[str]:
    """The attention proof before launch in a few words (None when no swap was asked for):
    ``PASS: max |Δ logits| 3.0e-07, same gradient set (CPU, float32)``."""
    if not isinstance(proof, dict) or not proof.get("verdict"):
        return None
    where = proof.get("source") or "CPU"
    if proof["verdict"] != "PASS":
        return f"{proof['verdict']} ({where}): {proof.get('reason') or 'no reason recorded'}"
    delta = proof.get("max_abs_logits")
    figure = f"max |Δ logits| {delta:.1e}" if isinstance(delta, (int, float)) else "logits equal"
    return f"PASS: {figure}, same gradient set ({where}{', cached' if proof.get('cached') else ''})"


def _has_weights(folder: Path) -> bool:
    return folder.is_dir() and (any(folder.glob("*.safetensors"))
                                or (folder / "model.safetensors.index.json").is_file())
