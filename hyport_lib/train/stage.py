"""Stage 04: smoke training — the stage contract.

Notebook 04, ``hyport train`` and ``hyport report`` all go through these four functions:
:func:`plan` checks everything and writes nothing (nothing starts when the dataset, the
model or the resume point is wrong), :func:`run` runs that plan (torchrun + DeepSpeed,
watched from here), :func:`summarize` judges it and :func:`record` writes the result
(which names the last checkpoint and the final weights for stage 05).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.backend import get_backend
from hyport_lib.results import StageSummary, TrainedWeights, record_summary
from hyport_lib.train.launch import launch
from hyport_lib.train.metrics import loss_span
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan, prepare
from hyport_lib.train.result import TrainProgress, TrainResult

#: The result stage 05 reads its hand-over from (:class:`TrainedWeights`) is this stage's.
STAGE = TrainedWeights.STAGE


def plan(params: Params) -> LaunchPlan:
    """Check everything and plan the launch on ``params.device``
    (:func:`hyport_lib.train.preflight.prepare`); no file, folder or lock is left behind.

    Raises:
        ValueError, PermissionError, RuntimeError: one line naming the parameter, file,
            record or card (a bad dataset lists every problem in ``details``).
    """
    return prepare(params, get_backend(params.device, num_cards=params.num_cards))


def run(plan: LaunchPlan, *, on_progress: Optional[Callable[[TrainProgress], None]] = None) -> TrainResult:
    """Run ``plan`` to its end: lock and fill the output folder, start torchrun, watch it
    (``on_progress`` gets the metrics so far as they grow; None: silent)."""
    return launch(plan, on_progress=on_progress)


def summarize(result: TrainResult) -> StageSummary:
    verdict, why = result.verdict()
    s = result.summary
    span = loss_span(s)
    loss = f"loss {span}" if span else "no loss logged"
    line = (f"{s.steps} steps on {result.plan.get('world_size')} {result.plan.get('device_kind')} "
            f"process(es), ZeRO-{result.plan.get('deepspeed', {}).get('zero_stage')}, "
            f"{result.plan.get('precision')}: exit {result.exit_code}, {loss}"
            # the PASS reason only repeats the steps and exit code said just before
            + ("; final weights written" if verdict == "PASS" else f"; {why}"))
    return StageSummary(verdict, line, result.headline())


def record(result: TrainResult, *, directory: Optional[os.PathLike] = None) -> Path:
    """Write the stage result (it names the last checkpoint and the final weights for 05)."""
    return record_summary(STAGE, summarize(result), data=result.to_dict(),
                          provenance=result.provenance, directory=directory)
