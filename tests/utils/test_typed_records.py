"""Typed records written and read back by one class (utils/typed_records.py, results.StageRecord,
the stage-04 hand-over): an older or odd record gives defaults, never an exception."""

from __future__ import annotations

from pathlib import Path

from hyport_lib.environment.stage import EnvironmentReport
from hyport_lib.results import Provenance, TrainedWeights, read_record
from hyport_lib.train import stage
from hyport_lib.train.output_dir import Checkpoint
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import MetricsSummary, StepMetrics, TrainResult, WorkerResult, final_weights, last_complete
from hyport_lib.triage import Triage
from hyport_lib.utils.typed_records import from_mapping, to_mapping


def test_a_missing_key_or_a_value_of_another_type_gives_the_default():
    report = from_mapping(EnvironmentReport, {
        "device": 3, "num_cards": True, "versions": ["x"],
        "checks": [{"name": "a", "verdict": "WARN", "reason": "r"}, {"name": "b", "verdict": "ODD", "reason": "r"},
                   "not a check"]})
    assert (report.device, report.num_cards, report.versions, report.system) == ("", 0, {}, {})
    assert [c.name for c in report.checks] == ["a"]  # a check its class refuses is left out
    assert from_mapping(EnvironmentReport, "not a mapping").checks == []


def test_a_result_reads_back_what_it_wrote(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    plan = from_mapping(LaunchPlan, {"model_path": "/m", "params": {"max_steps": 2}})
    worker = WorkerResult(status="ok", final_dir=str(tmp_path), train_metrics={"train_loss": 2.0})
    checkpoints = [Checkpoint(tmp_path / "checkpoint-1", 1, True)]
    result = TrainResult("ok", 0, 12.5, None, plan, MetricsSummary(steps=1, first_loss=2.0), worker, checkpoints,
                         final_weights(worker), last_complete(checkpoints), plan.model_path,
                         [StepMetrics(step=1, loss=2.0)], diagnosis=Triage(notes=["n"]), provenance=Provenance("cpu"))
    read = from_mapping(TrainResult, to_mapping(result))
    assert (read.exit_code, read.plan, read.metrics, read.summary, read.worker, read.checkpoints, read.diagnosis) == \
        (0, result.plan, result.metrics, result.summary, worker, checkpoints, result.diagnosis)
    assert read.plan.params.max_steps == 2 and read.worker.trainer_loss == 2.0
    assert read.provenance == Provenance("cpu") and stage.summarize(read) == stage.summarize(result)
    # The hand-over stage 05 reads is in the record stage 04 writes.
    assert from_mapping(TrainedWeights, to_mapping(result)) == \
        TrainedWeights(str(tmp_path), str(tmp_path / "checkpoint-1"), "/m")


def test_recorded_parameters_are_typed_but_not_checked_again(tmp_path):
    """A folder the record names may be gone since: the record still reads."""
    gone = str(tmp_path / "gone.json")
    params = TrainParams.from_dict({"max_steps": "3", "dataset_path": gone, "unknown": 1})
    assert (params.max_steps, params.dataset_path) == (TrainParams().max_steps, gone)  # "3": not an int
    assert from_mapping(LaunchPlan, {"params": {"dataset_path": gone}}).params.dataset_path == gone


def test_nested_classes_write_through_their_own_to_dict_and_read_paths_and_typed_dicts():
    assert to_mapping(Provenance("npu", emulated=True)) == {
        "device": "npu", "emulated": True, "label": "NPU-emulated on NPU (not an NPU measurement)"}
    assert to_mapping({"a": (Checkpoint(Path("/c"), 2, False),)}) == {
        "a": [{"path": "/c", "step": 2, "complete": False, "why_incomplete": ""}]}
    assert from_mapping(Checkpoint, {"path": "/c", "step": 2, "complete": True}).path == Path("/c")
    read = read_record({"data": {"diagnoses": {"0": {"notes": ["x"]}, "1": "odd"}}})
    assert read.data == {"diagnoses": {"0": {"notes": ["x"]}, "1": "odd"}}  # no type: as recorded
    from hyport_lib.inference.grid import GridResult
    grid = read_record({"data": {"diagnoses": {"0": {"notes": ["x"]}, "1": "odd"}}}, GridResult).data
    assert grid.diagnoses == {"0": Triage(notes=["x"])}  # an item of another type is left out


def test_an_odd_envelope_still_reads():
    read = read_record({"verdict": 7, "headline": [1], "data": None}, EnvironmentReport)
    assert (read.verdict, read.headline, read.data.checks) == (None, {}, [])
    assert from_mapping(TrainedWeights, {"final_dir": 1}) == TrainedWeights()
