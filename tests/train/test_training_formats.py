"""Stage 04 trains for real on each dataset format a LLaMA-Factory user brings: an alpaca
JSON, an openai ``messages`` JSON, a sharegpt JSON with ``user`` / ``assistant`` tags, an
alpaca parquet file and a ``dataset_info.json`` entry, each through the real stage (plan
+ run: torchrun + DeepSpeed on CPU) for 2 steps.

What is checked is what the model received: rank 0's first batch
(``logs/first_batch.json``), decoded, holds each of its records' prompts and system
prompt in the text and exactly their answers under the labels; the worker encoded every
record. The cheapest settings that still train: one process, ZeRO-0, no gradient
checkpointing, a short max_seq_len, text-only records (images are not the point here).
Each launch is its own dataset: none can share another's."""

from __future__ import annotations

import json

import pytest

from hyport_lib.train import stage
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.packing import first_batch_path
from hyport_lib.train.params import Params
from .test_dataset_formats import ALPACA, DATA, write_records

pytestmark = pytest.mark.slow

#: (dataset_path under DATA or "parquet", extra params, the format the plan must read)
CASES = {
    "alpaca_json": ("alpaca.json", {}, "alpaca"),
    "openai_messages_json": ("openai_messages.json", {}, "openai"),
    "sharegpt_user_assistant_json": ("sharegpt_user_assistant.json", {}, "sharegpt"),
    "alpaca_parquet": (None, {"dataset_format": "alpaca"}, "alpaca"),
    "dataset_info_entry": ("dataset_info.json", {"dataset": "guide_chat"}, "sharegpt"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_steps_train_on_each_format_and_the_model_gets_the_answers(tmp_path, case):
    name, extra, format = CASES[case]
    if name is None:
        path = write_records(ALPACA, tmp_path / "alpaca.parquet")
    else:
        path = DATA / name
    params = Params(dataset_path=str(path), output_dir=str(tmp_path / "out"), num_cards=1, zero_stage=0,
                    max_steps=2, save_steps=100000, max_seq_len=128, gradient_checkpointing=False,
                    throughput_warmup_steps=0, resume_from="none", **extra)
    plan = stage.plan(params)
    assert plan.dataset["layout"]["format"] == format
    assert any(note.startswith("dataset ") and format in note for note in plan.notes), plan.notes
    result = stage.run(plan)
    assert result.status == "ok" and result.exit_code == 0, result.reason
    assert [m.step for m in result.metrics] == [1, 2]
    assert all(m.loss > 0 for m in result.metrics)
    records = {r.record_id: r for r in load_dataset(path, options=params.dataset_options).records}
    assert result.worker.samples == len(records) == 3  # every record became a training sample

    listed = json.loads(first_batch_path(plan.output_dir).read_text())["rows"]
    assert listed and all(row["record_ids"] for row in listed)
    for row in listed:
        answers = "".join(row["answers"])
        expected = "".join(f"{text}<|im_end|>\n" for rid in row["record_ids"]
                           for role, text in records[rid].turns if role == "assistant")
        assert answers == expected, (row, expected)  # the answers, all of them, nothing else labelled
        assert row["label_mismatches"] == 0, row  # each label sits on the token it names
        for rid in row["record_ids"]:
            record = records[rid]
            for role, text in record.turns:
                assert text in row["text"], (rid, text)
                if role == "user":
                    assert text not in answers
            if record.system:
                assert f"<|im_start|>system\n{record.system}<|im_end|>" in row["text"]
