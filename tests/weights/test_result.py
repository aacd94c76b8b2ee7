"""What the weights stage found, summed up as the seed did (:mod:`hyport_lib.weights.result`)."""

from __future__ import annotations

import pytest
from transformers import AutoModelForImageTextToText

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.result import LISTED_SHARDS, WeightsResult, inspected


@pytest.mark.parametrize("shard_size, many", [("200MB", False), ("40KB", True)])
def test_the_summary_stays_one_short_line_for_any_shard_count(tmp_path, shard_size, many):
    """A 135 M model sharded at 300 KB made 212 shards and a 3,005-character summary line."""
    folder = tmp_path / "sharded"
    model = AutoModelForImageTextToText.from_pretrained(ensure_tiny_model())
    model.save_pretrained(folder, max_shard_size=shard_size)
    insp = inspect_checkpoint(folder)
    line = inspected(insp, {}, "").seed_line()
    assert (len(insp.shards) > LISTED_SHARDS) is many
    assert "\n" not in line and len(line) < 300, line
    assert ("in all" in line) is many


def test_a_record_reads_back_with_its_findings(tmp_path):
    """A finding is written with its class under ``class`` (the report's tables and drafts
    read that key); read back as the stage's RESULT it keeps its class, so the record's
    findings and their counts are the ones the run made, not an empty list."""
    import json

    from hyport_lib.checkpoint_files.findings import Finding
    from hyport_lib.results import record
    from hyport_lib.stages import read_stage_record
    from hyport_lib.weights import stage
    from hyport_lib.weights.compare import Comparison

    found = [Finding("shard_missing", "model-00002.safetensors", "gone", tensors=["a"]),
             Finding("dtype_changed", "base", "64 tensors changed dtype")]
    result = WeightsResult(path="/w", findings=found,
                           comparisons=[Comparison("base", "/w", "/b", findings=found[1:])])
    raw = json.loads(record(stage, result, directory=tmp_path).read_text(encoding="utf-8"))
    assert [f["class"] for f in raw["data"]["findings"]] == ["shard_missing", "dtype_changed"]
    read = read_stage_record(stage.STAGE, raw).data
    assert read.findings == found
    assert read.comparisons[0].findings == found[1:]
    assert read.counts == {"error": 1, "warning": 0, "info": 1} == raw["data"]["counts"]
