"""What a launch leaves behind (hyport_lib/train/result.py): the metrics file summed up (warm-up,
checkpoint seconds, gaps and repeats left out of or named in the figures) and cut at a resume."""

from __future__ import annotations

import json

import pytest

from hyport_lib.train.result import StepMetrics, loss_span, summarize_metrics, truncate_metrics
from hyport_lib.utils.typed_records import to_mapping


def _records(steps, **extra):
    return [StepMetrics(step=s, loss=5.0 - 0.1 * s, step_s=0.5 if s > 2 else 3.0, tokens=1000, real_tokens=600,
                        world_size=2, process_step=s, **extra) for s in steps]


def test_summary_leaves_warmup_out_and_finds_gaps_and_repeats():
    summary = summarize_metrics(_records(range(1, 11)), warmup_steps=2)
    assert summary.steps == 10 and summary.measured_steps == 8 and summary.mean_step_s == 0.5
    assert summary.tokens_per_s_per_card == pytest.approx(1000 / (2 * 0.5))
    assert summary.real_tokens_per_s_per_card == pytest.approx(600 / (2 * 0.5))
    assert "first 2 step(s)" in summary.throughput_definition
    broken = summarize_metrics(_records([1, 2, 3, 3, 5]), warmup_steps=0)
    assert broken.repeated_steps == [3] and broken.missing_steps == [4]
    flagged = summarize_metrics(_records([1, 2], nonfinite_loss=True, skipped=True))
    assert flagged.nonfinite_loss_steps == [1, 2] and flagged.skipped_steps == 2


def test_checkpoint_seconds_are_left_out_of_step_time_and_throughput():
    records = _records(range(1, 7))
    records[3].save_s = 0.4  # step 4 came after a checkpoint save: 0.5 s wall, 0.1 s training
    summary = summarize_metrics(records, warmup_steps=2)
    assert summary.checkpoint_s == pytest.approx(0.4)
    assert summary.mean_step_s == pytest.approx((0.5 * 3 + 0.1) / 4)
    assert summary.tokens_per_s_per_card == pytest.approx(4000 / (2 * (0.5 * 3 + 0.1)))
    assert "seconds spent writing checkpoints" in summary.throughput_definition


def test_loss_span_says_when_the_last_steps_had_no_finite_loss():
    records = _records(range(1, 5))
    assert loss_span(summarize_metrics(records)) == "4.9000 → 4.6000"
    for r in records[1:]:
        r.loss = float("nan")
    summary = summarize_metrics(records)
    assert summary.last_loss == summary.first_loss and summary.last_loss_step == 1
    assert loss_span(summary) == "4.9000 → 4.9000 (last finite: step 1 of 4)"
    assert loss_span(summarize_metrics([StepMetrics(step=1, loss=None)])) is None


def test_truncate_keeps_steps_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(to_mapping(r)) + "\n" for r in _records(range(1, 8))) + '{"step": 8, "lo')
    assert truncate_metrics(path, 4) == 4
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
    assert truncate_metrics(tmp_path / "none.jsonl", 0) == 0
