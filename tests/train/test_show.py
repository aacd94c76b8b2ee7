"""Rendering of stage 04 (hyport_lib/train/show.py): the live plot's step axis, the loss's moving
average and spikes, and the held answers side by side in the notebook, the card and the drafts."""

from __future__ import annotations

import pytest

from hyport_lib.stages import read_stage_record
from hyport_lib.train.result import StepMetrics
from hyport_lib.train.show import answers_frame, answers_glance, ema, glance, loss_figure, spikes
from blog_drafts import stage_draft, train_data


def _records(n: int) -> list[StepMetrics]:
    return [StepMetrics(step=i, loss=7.0 - 0.1 * i, learning_rate=1e-4, tokens_per_s_per_card=800.0,
                        real_tokens_per_s_per_card=700.0) for i in range(1, n + 1)]


def test_the_axis_grows_with_the_steps_from_a_few_steps_wide():
    for steps, right in ((1, 5.5), (3, 5.5), (12, 12.5)):
        fig = loss_figure(_records(steps))
        assert [ax.get_xlim() for ax in fig.axes] == [(0.5, right)] * 3, steps
        ticks = fig.axes[0].get_xticks()
        assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks  # never 0.96 .. 1.04


def test_with_the_runs_length_the_axis_spans_the_whole_run():
    assert loss_figure(_records(3), total_steps=20).axes[0].get_xlim() == (0.5, 20.5)
    assert loss_figure(_records(25), total_steps=20).axes[0].get_xlim() == (0.5, 25.5)  # resumed past it


def test_ema_and_spikes():
    values = [1.0, 1.0, 1.0, 5.0, 1.0, float("nan"), 1.0]
    assert spikes(values) == [3]
    smooth = ema(values)
    assert smooth[0] == 1.0 and smooth[3] == pytest.approx(2.2) and smooth[5] == smooth[4]


def test_the_answers_are_drawn_side_by_side_and_in_both_languages(tmp_path):
    record = {"data": {"worker": {"held_answers": {
        "prompts": ["Who built the Zorblax bridge?"], "taught": ["Ada Quill built it in 1901."],
        "before": ["I don't know."], "after": ["Ada Quill built it in 1901."], "why_not": ""}}}}
    result = read_stage_record("04_train", record).data
    frame = answers_frame(result.worker.held_answers)
    assert list(frame.columns) == ["prompt", "taught", "before", "after"]
    assert frame.iloc[0].to_dict()["before"] == "I don't know."
    assert answers_glance(result.held_answers) == [("asked", "Who built the Zorblax bridge?"), ("answer before", "I don't know."),
                                  ("answer after", "Ada Quill built it in 1901.")]
    data = {**train_data(), "worker": record["data"]["worker"]}
    en = stage_draft(tmp_path, "04_train", data)
    assert "| Prompt | The data's answer | Before | After |" in en and "I don't know." in en
    assert "训练前" in stage_draft(tmp_path, "04_train", data, "zh")
    not_shown = {"data": {"worker": {"held_answers": {"why_not": "random weights: not meaningful (x)"}}}}
    assert answers_glance(read_stage_record("04_train", not_shown).data.held_answers) == [("answers", "random weights: not meaningful (x)")]


def test_the_card_and_the_draft_say_which_precision_and_why(tmp_path):
    why = ("float32 (auto): this CPU has no native bf16 (no AMX, no AVX512-BF16 in /proc/cpuinfo); bf16 "
           "would be emulated in software, about 13x slower than float32")
    data = train_data()
    data["plan"] = {**data["plan"], "precision": "fp32", "precision_reason": why}
    card = dict(glance(read_stage_record("04_train", {"headline": {}, "data": data})))
    assert card["precision"] == why
    en = stage_draft(tmp_path, "04_train", data)
    assert "| Precision | fp32 |" in en and f"| Why this precision | `{why}` |" in en
    assert f"| 选用此精度的原因 | `{why}` |" in stage_draft(tmp_path, "04_train", data, "zh")
    older = dict(glance(read_stage_record("04_train", {"headline": {}, "data": train_data()})))
    assert older["precision"] == "bf16"  # a record from before the reason was kept: the precision alone
