"""A stage 04 stopped part-way, as its launcher keeps it: read by the tests of stage 04's
summary (tests/train) and of stage 05 after it (tests/weights)."""

from __future__ import annotations

import json

from hyport_lib.train import stage
from hyport_lib.train.launch import collect
from hyport_lib.train.params import Params
from hyport_lib.train.result import TrainResult


def stopped_after(tmp_path, steps: int, max_steps: int = 20) -> TrainResult:
    """What stage 04 keeps when Stop (or Ctrl-C) ends torchrun after ``steps`` logged steps:
    the launcher's own interrupt path (``collect(..., stopped=True)``, no exit code, no final
    weights) over a metrics file as rank 0 writes it."""
    plan = stage.plan(Params(output_dir=str(tmp_path / "run"), max_steps=max_steps, resume_from="none"))
    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text("".join(json.dumps({"step": s, "loss": 6.7 - s / 10, "tokens": 64, "real_tokens": 60,
                                           "step_s": 0.5}) + "\n" for s in range(1, steps + 1)))
    return collect(plan, None, 3.0, False, stopped=True)
