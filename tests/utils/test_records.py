"""Typed records read back (utils/records.py, results.StageRecord, the stage-04 hand-over):
an older or odd record gives defaults, never an exception."""

from __future__ import annotations

from hyport_lib.environment.collect import EnvironmentReport
from hyport_lib.results import Provenance, StageRecord, TrainedWeights
from hyport_lib.train.metrics import MetricsSummary
from hyport_lib.train import stage
from hyport_lib.train.result import TrainResult


def test_a_missing_key_or_a_value_of_another_type_gives_the_default():
    report = EnvironmentReport.from_dict({"device": 3, "num_cards": True, "versions": ["x"],
                                          "checks": [{"name": "a", "verdict": "WARN", "reason": "r"},
                                                     {"name": "b", "verdict": "ODD", "reason": "r"},
                                                     "not a check"]})
    assert (report.device, report.num_cards, report.versions, report.system) == ("cpu", 0, {}, {})
    assert [c.name for c in report.checks] == ["a"]  # a check its class refuses is left out
    assert EnvironmentReport.from_dict("not a mapping").checks == []


def test_a_result_reads_back_what_it_wrote(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    result = TrainResult("ok", 0, 12.5, {"model_path": "/m", "params": {"max_steps": 2}},
                         [{"step": 1, "loss": 2.0}], MetricsSummary(steps=1, first_loss=2.0),
                         worker={"final_dir": str(tmp_path)}, provenance=Provenance("cpu"))
    read = TrainResult.from_dict(result.to_dict())
    assert (read.exit_code, read.plan, read.metrics, read.summary) == (0, result.plan, result.metrics,
                                                                       result.summary)
    assert read.provenance == Provenance("cpu") and stage.summarize(read) == stage.summarize(result)
    # The hand-over stage 05 reads is in the record stage 04 writes.
    assert TrainedWeights.from_dict(result.to_dict()) == TrainedWeights(str(tmp_path), None, "/m")


def test_an_odd_envelope_still_reads():
    read = StageRecord.from_dict({"verdict": 7, "headline": [1], "data": None}, EnvironmentReport)
    assert (read.verdict, read.headline, read.data.checks) == (None, {}, [])
    assert TrainedWeights.from_dict({"final_dir": 1}) == TrainedWeights()
