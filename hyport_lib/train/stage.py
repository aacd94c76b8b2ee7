"""Stage 04: smoke training — the stage contract that notebook 04, ``hyport train`` and ``hyport
report`` all go through."""

from __future__ import annotations

from typing import Callable, Optional

from hyport_lib.backend import get_backend
from hyport_lib.results import INTERRUPTED, StageSummary, TrainedWeights
from hyport_lib.train.launch import launch
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan, prepare
from hyport_lib.train.result import TrainProgress, TrainResult, loss_span, proof_summary
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.utils.wording import counted, plural

#: The result stage 05 reads its hand-over from (:class:`TrainedWeights`) is this stage's.
STAGE = TrainedWeights.STAGE
RESULT = TrainResult


def plan(params: Params) -> LaunchPlan:
    """Check everything and plan the launch (:func:`hyport_lib.train.preflight.prepare`); no file,
    folder or lock is left behind (a bad dataset lists every problem in ``details``)."""
    return prepare(params, get_backend(params.device, num_cards=params.num_cards))


def run(plan: LaunchPlan, *, on_progress: Optional[Callable[[TrainProgress], None]] = None) -> TrainResult:
    """Run ``plan`` to its end (``on_progress`` gets the metrics so far as they grow)."""
    return launch(plan, on_progress=on_progress)


def summarize(result: TrainResult) -> StageSummary:
    """The verdict, why, one line and the index's figures. PASS: torchrun exited 0, every step
    from 1 to the last logged exactly once, no non-finite loss or gradient norm, no skipped step,
    the final weights exist; WARN: finished with non-finite values or skipped steps; else FAIL."""
    verdict, why = _verdict(result)
    if result.plan.params.node_rank > 0:
        return StageSummary(verdict, why if verdict != "PASS" else _node_line(result), _node_headline(result), why)
    s = result.summary
    span = loss_span(s)
    loss = f"loss {span}" if span else "no loss logged"
    plan = result.plan
    line = (f"{counted(s.steps, 'step')} on {plan.world_size} {plan.device_kind} {plural('process', plan.world_size)}, "
            f"ZeRO-{plan.deepspeed.zero_stage}, {plan.precision}: {how_torchrun_ended(result)}, {loss}"
            # the PASS reason only repeats the steps and exit code said just before
            + ("; final weights written" if verdict == "PASS" else f"; {why}"))
    return StageSummary(verdict, line, _headline(result), why)


def how_torchrun_ended(result: TrainResult) -> str:
    """``exit 0``; without an exit code (stopped by Stop or Ctrl-C, or by the job's nodes,
    perhaps before torchrun started) what is true, never ``exit None``: the reason follows."""
    if result.exit_code is not None:
        return f"exit {result.exit_code}"
    if result.status == "interrupted":
        return "interrupted before torchrun exited"
    return "no torchrun exit code"


def _verdict(result: TrainResult) -> tuple[str, str]:
    s = result.summary
    if result.status == "interrupted":
        return INTERRUPTED, result.reason or "stopped"
    if result.status != "ok":
        why = result.reason or result.status
        if result.diagnosis:
            why += f"; diagnosis: {result.diagnosis.summary_line()}"
        return "FAIL", why
    params, worker = result.plan.params, result.worker
    if params.node_rank > 0:  # node 0 writes the job's record: metrics, checkpoints, weights
        return "PASS", _node_line(result)
    if not result.final_dir:
        return "FAIL", "torchrun exited 0 but no final weights were written"
    if not s.steps:
        return "FAIL", "no step was trained (no step in the metrics)"
    # max_steps when given: the worker's own global_step cannot disagree with itself.
    expected = params.max_steps or (worker.global_step if worker else None)
    # Resumed from a checkpoint of another folder, the metrics start after it.
    first_ok = (None, 1, ((worker.resumed_step if worker else 0) or 0) + 1)
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
        problems.append(f"{counted(s.skipped_steps, 'step')} skipped by the optimizer (overflow)")
    if problems:
        return "WARN", "; ".join(problems)
    return "PASS", f"{counted(s.steps, 'step')}, exit code 0, final weights written"


def _node_line(result: TrainResult) -> str:
    """A node > 0's own account: ``node 1 of 2 (host h): 1 rank exited 0; the job's record is
    node 0's (<output_dir>)`` (it never repeats node 0's metrics or weights)."""
    plan, params = result.plan, result.plan.params
    ended = "exited 0" if result.status == "ok" else f"ended {result.status}"
    return (f"node {params.node_rank} of {params.nnodes} (host {result.host or '?'}): "
            f"{counted(plan.nproc_per_node, 'rank')} {ended}; the job's record is node 0's ({plan.output_dir})")


def _node_headline(result: TrainResult) -> dict:
    return {"node": f"{result.plan.params.node_rank} of {result.plan.params.nnodes}", "host": result.host,
            "exit code": result.exit_code, "ranks": result.plan.nproc_per_node, "total s": round(result.wall_s, 1)}


def _headline(result: TrainResult) -> dict:
    s, plan = result.summary, result.plan
    return {
        "exit code": result.exit_code,
        "steps": s.steps,
        "loss first → last": loss_span(s),
        # the mean of the logged step losses, not the Trainer's own (WorkerResult.trainer_loss)
        "train_loss": round(s.mean_loss, 4) if s.mean_loss is not None else None,
        "tokens/s/p": round(s.tokens_per_s_per_card, 1) if s.tokens_per_s_per_card else None,
        "real tokens/s/p": (round(s.real_tokens_per_s_per_card, 1)
                            if s.real_tokens_per_s_per_card else None),
        "mean step s": round(s.mean_step_s, 3) if s.mean_step_s else None,
        "total s": round(result.wall_s, 1),
        "skipped steps": s.skipped_steps,
        "cards": plan.world_size,
        "ZeRO": plan.deepspeed.zero_stage,
        "precision": plan.precision,
        "attention": plan.attn_implementation,
        "attention proof": proof_summary(plan.attention_proof),
    }


def result_data(result: TrainResult) -> dict:
    """The result as recorded and as ``hyport train --json`` prints it, with the verdict and why."""
    summary = summarize(result)
    data = {"verdict": summary.verdict, "why": summary.why, **to_mapping(result)}
    data["worker"] = data["worker"] or {}  # rank 0 wrote nothing: {}, as records have always held it
    return data
