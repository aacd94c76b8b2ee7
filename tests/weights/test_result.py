"""What the weights stage found, summed up as the seed did (:mod:`hyport_lib.weights.result`)."""

from __future__ import annotations

import pytest
from transformers import AutoModelForImageTextToText

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.result import LISTED_SHARDS, inspected


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
