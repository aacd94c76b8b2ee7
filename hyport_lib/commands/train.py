"""``hyport train``: stage 04's smoke training from the command line, with a bar while the
plan reads the dataset and one showing the loss. Non-finite values or skipped steps WARN;
a bad dataset is exit 2 with nothing started or written.
"""

from __future__ import annotations

import contextlib

from hyport_lib.commands._stage import StageCommand, ProgressWriter
from hyport_lib.train.dataset import reporting_to
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import TrainProgress
from hyport_lib.train.show import nodes_frame, summary_frame
from hyport_lib.utils.wording import plural


@contextlib.contextmanager
def _reading_dataset():
    """Records read and tokenised, said from the first second (100,000 records tokenise
    for minutes)."""
    bar = ProgressWriter("dataset", "record", total=lambda p: p.total, done=lambda p: p.done,
                      phase=lambda p: p.phase)
    try:
        with reporting_to(bar):
            yield
    finally:
        bar.close()


def _last_loss(progress: TrainProgress) -> str:
    if progress.waiting_for and not progress.records:
        return f"waiting for {plural('node', len(progress.waiting_for))} {', '.join(map(str, progress.waiting_for))}"
    last = progress.records[-1] if progress.records else None
    if last is not None and last.loss is not None:
        return f"loss {last.loss:.4f}"
    return "loss nan" if last is not None and last.nonfinite_loss else ""


def _plan_lines(plan: LaunchPlan) -> list[str]:
    return [*(f"note: {note}" for note in plan.notes),
            f"training: {plan.world_size} {plan.device_kind} {plural('process', plan.world_size)} -> {plan.output_dir}"]


def _text(result) -> str:
    text = summary_frame(result).to_string(index=False)
    if result.nodes:  # a multi-node job's table, in node 0's record
        text += "\n\n" + nodes_frame(result).to_string(index=False)
    return "\n".join([text, *(f"note: {note}" for note in result.node_notes)])


COMMAND = StageCommand(
    "train", text=_text,
    planning=_reading_dataset, plan_lines=_plan_lines,
    bar=lambda: ProgressWriter("train", "step", total=lambda p: p.total_steps, done=lambda p: p.done_steps,
                            postfix=_last_loss))
