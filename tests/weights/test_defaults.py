"""The folders stage 05 checks when none is given (:mod:`hyport_lib.weights.defaults`):
stage 04's hand-over, else the tiny model, never the tiny model in place of a stage 04 that
trained nothing."""

from __future__ import annotations

import json

import pytest

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.defaults import TINY_SHARD_SIZE, resolve_paths


def test_default_folders(tmp_path, monkeypatch):
    from hyport_lib.results import StageRecord, TrainedWeights, write_record
    from hyport_lib.utils.typed_records import to_mapping

    results = tmp_path / "results"
    picked = resolve_paths(results=results)
    assert picked.weights == str(ensure_tiny_model(max_shard_size=TINY_SHARD_SIZE))
    assert picked.checkpoint == str(ensure_tiny_model()) and picked.base is None
    assert "no stage 04 result" in picked.note
    final, checkpoint = tmp_path / "run", tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    data = to_mapping(TrainedWeights(str(final), str(checkpoint), str(ensure_tiny_model())))
    write_record(StageRecord("04_train", "PASS", data=data), directory=results)
    picked = resolve_paths(results=results)
    assert (picked.weights, picked.checkpoint, picked.base) == (str(final), str(checkpoint), str(ensure_tiny_model()))
    assert "stage 04" in picked.note
    given = resolve_paths("/x", None, None, results=results)
    assert (given.weights, given.base, given.checkpoint) == ("/x", None, None)
    data["final_dir"] = str(tmp_path / "gone")  # a record whose folder was deleted: tiny again
    write_record(StageRecord("04_train", "PASS", data=data), directory=results)
    assert resolve_paths(results=results).checkpoint == str(ensure_tiny_model())
    assert "no usable stage 04 weights" in resolve_paths(results=results).note  # and says why
    (results / "04_train.json").write_text(json.dumps([1]))  # unreadable: tiny again
    assert "no usable stage 04 weights" in resolve_paths(results=results).note
    # stage 04 failed without weights: an error, never a PASS on the tiny model in its place
    write_record(StageRecord("04_train", "FAIL", "torchrun exited 1", data={"final_dir": None}), directory=results)
    with pytest.raises(ValueError, match="stage 04 trained no weights to check .*FAIL: torchrun exited 1"):
        resolve_paths(results=results)
    assert resolve_paths("/x", None, None, results=results).weights == "/x"  # a path given still wins


def test_stage05_in_a_run_whose_stage04_wrote_no_record_checks_no_stand_in(tmp_path, monkeypatch):
    """Stage 04 refused before launch (a bad dataset) writes no record: in that report run
    stage 05 errors with stage 04's verdict instead of PASSing on the tiny model."""
    run_dir = tmp_path / "run"
    (run_dir / "results").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"stages": [
        {"stage": "04_train", "verdict": "FAIL", "error": "DatasetError: 2 of 14 records have problems"},
        {"stage": "05_weights", "verdict": "RUNNING"}]}))
    monkeypatch.setenv("HYPORT_RUN_DIR", str(run_dir))
    with pytest.raises(ValueError, match=r"stage 04 of this run trained no weights to check \(FAIL: "
                                         r"DatasetError: 2 of 14 records"):
        resolve_paths(results=run_dir / "results")
    assert resolve_paths("/x", None, None, results=run_dir / "results").weights == "/x"
    (run_dir / "run.json").write_text(json.dumps({"stages": [{"stage": "05_weights", "verdict": "RUNNING"}]}))
    assert "no stage 04 result" in resolve_paths(results=run_dir / "results").note  # 04 not in the run
