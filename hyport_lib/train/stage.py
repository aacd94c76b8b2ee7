"""Stage 04: smoke training — the stage contract that notebook 04, ``hyport train`` and ``hyport
report`` all go through."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.backend import get_backend
from hyport_lib.results import INTERRUPTED, StageSummary, TrainedWeights, record_summary
from hyport_lib.train.launch import launch
from hyport_lib.train.metrics import loss_span
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan, prepare
from hyport_lib.train.result import TrainProgress, TrainResult, proof_summary
from hyport_lib.triage import Triage

#: The result stage 05 reads its hand-over from (:class:`TrainedWeights`) is this stage's.
STAGE = TrainedWeights.STAGE


def plan(params: Params) -> LaunchPlan:
    """Check everything and plan the launch (:func:`hyport_lib.train.preflight.prepare`); no file,
    folder or lock is left behind (a bad dataset lists every problem in ``details``)."""
    return prepare(params, get_backend(params.device, num_cards=params.num_cards))


def run(plan: LaunchPlan, *, on_progress: Optional[Callable[[TrainProgress], None]] = None) -> TrainResult:
    """Run ``plan`` to its end (``on_progress`` gets the metrics so far as they grow)."""
    return launch(plan, on_progress=on_progress)


@dataclass
class TrainSummary(StageSummary):
    """The stage summary and the reason for its verdict in a few words (recorded as ``why``)."""

    why: str = ""


def summarize(result: TrainResult) -> TrainSummary:
    """The verdict, why, one line and the index's figures. PASS: torchrun exited 0, every step
    from 1 to the last logged exactly once, no non-finite loss or gradient norm, no skipped step,
    the final weights exist; WARN: finished with non-finite values or skipped steps; else FAIL."""
    verdict, why = _verdict(result)
    s = result.summary
    span = loss_span(s)
    loss = f"loss {span}" if span else "no loss logged"
    line = (f"{s.steps} steps on {result.plan.get('world_size')} {result.plan.get('device_kind')} "
            f"process(es), ZeRO-{result.plan.get('deepspeed', {}).get('zero_stage')}, "
            f"{result.plan.get('precision')}: exit {result.exit_code}, {loss}"
            # the PASS reason only repeats the steps and exit code said just before
            + ("; final weights written" if verdict == "PASS" else f"; {why}"))
    return TrainSummary(verdict, line, _headline(result), why)


def _verdict(result: TrainResult) -> tuple[str, str]:
    s = result.summary
    if result.status == "interrupted":
        return INTERRUPTED, result.reason or "stopped"
    if result.status != "ok":
        why = result.reason or result.status
        if result.diagnosis:
            why += f"; diagnosis: {Triage.from_dict(result.diagnosis).summary_line()}"
        return "FAIL", why
    node = int(result.plan.get("params", {}).get("node_rank") or 0)
    if node > 0:  # global rank 0, on node 0, writes the metrics and the weights
        nodes = result.plan.get("params", {}).get("nnodes")
        return "PASS", f"node {node} of {nodes}: its ranks exited 0 (metrics and weights are on node 0)"
    if not result.final_dir:
        return "FAIL", "torchrun exited 0 but no final weights were written"
    if not s.steps:
        return "FAIL", "no step was trained (no step in the metrics)"
    # max_steps when given: the worker's own global_step cannot disagree with itself.
    expected = result.plan["params"].get("max_steps") or result.worker.get("global_step")
    # Resumed from a checkpoint of another folder, the metrics start after it.
    first_ok = (None, 1, int(result.worker.get("resumed_step") or 0) + 1)
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


def _headline(result: TrainResult) -> dict:
    s, plan = result.summary, result.plan
    return {
        "exit code": result.exit_code,
        "steps": s.steps,
        "loss first → last": loss_span(s),
        # The mean of the logged step losses: the Trainer's own train_loss covers only the
        # steps of its process (not those before a resume) and counts a NaN step as 0.
        "train_loss": round(s.mean_loss, 4) if s.mean_loss is not None else None,
        "tokens/s/p": round(s.tokens_per_s_per_card, 1) if s.tokens_per_s_per_card else None,
        "real tokens/s/p": (round(s.real_tokens_per_s_per_card, 1)
                            if s.real_tokens_per_s_per_card else None),
        "mean step s": round(s.mean_step_s, 3) if s.mean_step_s else None,
        "total s": round(result.wall_s, 1),
        "skipped steps": s.skipped_steps,
        "cards": plan.get("world_size"),
        "ZeRO": plan.get("deepspeed", {}).get("zero_stage"),
        "precision": plan.get("precision"),
        "attention": plan.get("attn_implementation"),
        "attention proof": proof_summary(plan.get("attention_proof")),
    }


def result_data(result: TrainResult) -> dict:
    """The result as recorded and as ``hyport train --json`` prints it, with the verdict and why."""
    summary = summarize(result)
    return {"verdict": summary.verdict, "why": summary.why, **result.to_dict()}


def record(result: TrainResult, *, params: Optional[Params] = None,
           directory: Optional[os.PathLike] = None) -> Path:
    """Write the stage result (it names the last checkpoint and the final weights for 05).
    ``params``: what it ran with (kept in the record, with every field)."""
    return record_summary(STAGE, summarize(result), data=result_data(result),
                          provenance=result.provenance, params=params, directory=directory)
