"""What a training launch leaves behind, and its verdict.

:class:`TrainResult` holds the exit, the metrics (one record per step), their summary,
what rank 0 reported at the end (``train_result.json``: the Trainer's ``train_loss``
and runtime, the final folder), the checkpoints found and the plan that ran. The
verdict: PASS when torchrun exited 0, every step from 1 to the last was logged exactly
once, no loss or gradient norm was non-finite, no step was skipped and the final
weights exist; WARN when it finished but with non-finite values or skipped steps;
FAIL otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.results import Provenance, TrainedWeights
from hyport_lib.train.metrics import MetricsSummary, loss_span
from hyport_lib.triage import Triage
from hyport_lib.utils.records import from_mapping

#: What rank 0 writes into output_dir at the end of a run (read by the launcher).
RESULT_FILE = "train_result.json"


@dataclass
class TrainProgress:
    """Passed to ``on_progress`` while the run goes on."""

    records: list[dict]
    total_steps: Optional[int]
    elapsed_s: float
    running: bool = True

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

    @property
    def expected_steps(self) -> Optional[int]:
        # max_steps when given: the worker's own global_step cannot disagree with itself.
        return self.plan["params"].get("max_steps") or self.worker.get("global_step")

    def verdict(self) -> tuple[str, str]:
        """``(PASS|WARN|FAIL, why)`` as described in the module docstring."""
        s = self.summary
        if self.status != "ok":
            why = self.reason or self.status
            if self.diagnosis:
                why += f"; diagnosis: {Triage.from_dict(self.diagnosis).summary_line()}"
            return "FAIL", why
        node = int(self.plan.get("params", {}).get("node_rank") or 0)
        if node > 0:  # global rank 0, on node 0, writes the metrics and the weights
            nodes = self.plan.get("params", {}).get("nnodes")
            return "PASS", f"node {node} of {nodes}: its ranks exited 0 (metrics and weights are on node 0)"
        if not self.final_dir:
            return "FAIL", "torchrun exited 0 but no final weights were written"
        if not s.steps:
            return "FAIL", "no step was trained (no step in the metrics)"
        expected = self.expected_steps
        # Resumed from a checkpoint of another folder, the metrics start after it.
        first_ok = (None, 1, int(self.worker.get("resumed_step") or 0) + 1)
        if s.repeated_steps or s.missing_steps or (expected and s.last_step != expected) \
                or (s.first_step not in first_ok):
            return "FAIL", (f"metrics are not steps {first_ok[-1] if s.first_step != 1 else 1}..{expected} exactly once "
                            f"(repeated {s.repeated_steps}, missing {s.missing_steps}, "
                            f"first {s.first_step}, last {s.last_step})")
        problems = []
        if s.nonfinite_loss_steps:
            problems.append(f"non-finite loss at steps {s.nonfinite_loss_steps}")
        if s.nonfinite_grad_norm_steps:
            problems.append(f"non-finite grad norm at steps {s.nonfinite_grad_norm_steps}")
        if s.skipped_steps:
            problems.append(f"{s.skipped_steps} step(s) skipped by the optimizer (overflow)")
        if problems:
            return "WARN", "; ".join(problems)
        return "PASS", f"{s.steps} steps, exit code 0, final weights written"

    def headline(self) -> dict:
        s = self.summary
        return {
            "exit code": self.exit_code,
            "steps": s.steps,
            "loss first → last": loss_span(s),
            # The mean of the logged step losses: the Trainer's own train_loss covers only the
            # steps of its process (not those before a resume) and counts a NaN step as 0.
            "train_loss": round(s.mean_loss, 4) if s.mean_loss is not None else None,
            "tokens/s/p": round(s.tokens_per_s_per_card, 1) if s.tokens_per_s_per_card else None,
            "real tokens/s/p": (round(s.real_tokens_per_s_per_card, 1)
                                if s.real_tokens_per_s_per_card else None),
            "mean step s": round(s.mean_step_s, 3) if s.mean_step_s else None,
            "total s": round(self.wall_s, 1),
            "skipped steps": s.skipped_steps,
            "cards": self.plan.get("world_size"),
            "ZeRO": self.plan.get("deepspeed", {}).get("zero_stage"),
            "precision": self.plan.get("precision"),
            "attention": self.plan.get("attn_implementation"),
            "attention proof": proof_summary(self.plan.get("attention_proof")),
        }

    def handover(self) -> TrainedWeights:
        """What stage 05 checks: the final weights, the last checkpoint, the starting model."""
        return TrainedWeights(self.final_dir, self.last_checkpoint, self.plan.get("model_path"))

    def to_dict(self) -> dict:
        verdict, why = self.verdict()
        return {
            "status": self.status, "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3),
            "verdict": verdict, "why": why, "reason": self.reason, "plan": self.plan,
            "summary": self.summary.to_dict(), "worker": self.worker,
            "checkpoints": self.checkpoints, **self.handover().to_dict(), "metrics": self.metrics,
            "log_tail": self.log_tail, "diagnosis": self.diagnosis,
            "provenance": self.provenance.to_dict() if self.provenance else None,
        }

    @classmethod
    def from_dict(cls, data) -> "TrainResult":
        """The result as :meth:`to_dict` recorded it (its verdict and the folders it named
        are derived again, not read); an older or odd record gives the defaults where it
        differs (see :mod:`hyport_lib.utils.records`)."""
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
