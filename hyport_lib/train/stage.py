"""Stage 04: smoke training — the stage id, the stage function and its record.

The notebook and ``hyport train`` both check and plan with :func:`plan` (nothing starts
when the dataset, the model or the resume point is wrong), run that plan with
:func:`run` (torchrun + DeepSpeed, watched from here) and record with :func:`record`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.results import StageSummary, record_summary
from hyport_lib.train.config import TrainConfig
from hyport_lib.train.launch import launch
from hyport_lib.train.metrics import loss_span
from hyport_lib.train.preflight import LaunchPlan, prepare
from hyport_lib.train.result import TrainProgress, TrainResult

STAGE = "04_train"


def plan(config: Optional[TrainConfig] = None, *, backend=None, **params) -> LaunchPlan:
    """Check everything and plan the launch; ``params`` are :class:`TrainConfig` fields."""
    config = config if config is not None else TrainConfig(**params)
    return prepare(config, backend)


def check_parameters(params: dict) -> None:
    """The checks :class:`TrainConfig` makes, on a run's parameters for this stage (those
    of notebook 04 that are config fields), before any stage of the run starts.

    Raises:
        ValueError: naming the parameter, its value and what it accepts.
    """
    from dataclasses import fields

    from hyport_lib.models.preflight import check_attn_implementation, check_model_path

    known = {f.name for f in fields(TrainConfig)}
    given = {k: v for k, v in params.items() if k in known}
    if given.get("output_dir") is None:  # the notebook's None: a new folder per run
        given.pop("output_dir", None)
    config = TrainConfig(**given)
    check_model_path(config.model_path, local_only="stage 04 (training)")
    for key in ("dataset_path", "deepspeed_config"):
        value = str(getattr(config, key) or "").strip()
        if value and not Path(value).expanduser().is_file():
            raise ValueError(f"{key}={value!r}: no such file")
    if not config.packing:
        check_attn_implementation(config.attn_implementation)


def run(launch_plan: Optional[LaunchPlan] = None, *,
        on_update: Optional[Callable[[TrainProgress], None]] = None, **params) -> TrainResult:
    """The stage function: run ``launch_plan`` (or plan from ``params`` first)."""
    launch_plan = launch_plan if launch_plan is not None else plan(**params)
    return launch(launch_plan, on_update=on_update)


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


def record(result: TrainResult, *, directory: Optional[os.PathLike] = None,
           stage: Optional[str] = None) -> Path:
    """Write the stage result (it names the last checkpoint and the final weights for 05)."""
    return record_summary(stage or STAGE, summarize(result), data=result.to_dict(),
                          provenance=result.provenance, directory=directory)
