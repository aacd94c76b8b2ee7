"""Stage 04 as a whole (hyport_lib/train/stage.py): a bad dataset stops `hyport train` before any
process starts, and a run that logged no step is no PASS."""

from __future__ import annotations

import json

from hyport_lib.train import stage
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import MetricsSummary, TrainResult, WorkerResult, final_weights
from hyport_lib.utils.typed_records import from_mapping
from stopped_training import stopped_after


def test_a_bad_dataset_stops_before_any_process_starts(tmp_path, monkeypatch, capsys):
    from hyport_lib import processes
    from hyport_lib.commands import main

    started = []
    monkeypatch.setattr(processes, "start_child", lambda *a, **k: started.append(a))
    data = tmp_path / "bad.json"
    data.write_text(json.dumps([{"id": "x1", "conversations": []},
                                {"id": "x2", "conversations": [{"from": "gpt", "value": "hi"}]}]))
    rc = main(["train", "--dataset-path", str(data), "--output-dir", str(tmp_path / "out"),
               "--no-record"])
    err = capsys.readouterr().err
    assert rc == 2 and not started
    assert "2 with problems" in err and "'x1'" in err and "'x2'" in err
    assert "conversations[0].from" in err
    assert not (tmp_path / "out").exists()  # the plan wrote nothing


def test_a_run_that_logged_no_step_is_no_pass_even_with_weights_written(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"")
    worker = WorkerResult(status="ok", final_dir=str(out))
    empty = TrainResult("ok", 0, 1.0, None, from_mapping(LaunchPlan, {"params": {"max_steps": None}}),
                        MetricsSummary(), worker, final_dir=final_weights(worker))
    judged = stage.summarize(empty)
    assert (judged.verdict, judged.why) == ("FAIL", "no step was trained (no step in the metrics)")
    assert judged.summary.startswith("0 steps on ")
    one = stage.summarize(TrainResult("ok", 0, 1.0, None, empty.plan, MetricsSummary(steps=1), worker,
                                      final_dir=final_weights(worker)))
    assert one.summary.startswith("1 step on "), one.summary  # never "1 steps"
    assert (one.verdict, one.why) == ("PASS", "1 step, exit code 0, final weights written")


def test_a_run_whose_rank_0_wrote_nothing_records_an_empty_worker_as_before(tmp_path):
    """A launch that died before rank 0 wrote its result (a timeout, a crash) has no worker
    result: its record keeps the shape records had before the typed result, ``"worker": {}``
    (the drafts and any script reading ``data.worker.<key>`` read an object there)."""
    from hyport_lib.results import read_record, record

    died = TrainResult("timeout", None, 8.0, "timeout after 8s",
                       from_mapping(LaunchPlan, {"params": {"max_steps": 2}}), MetricsSummary(), None)
    assert stage.result_data(died)["worker"] == {}
    raw = json.loads(record(stage, died, directory=tmp_path).read_text(encoding="utf-8"))
    assert raw["verdict"] == "FAIL" and raw["data"]["worker"] == {}
    assert read_record(raw, TrainResult).data.trainer_loss is None


def test_a_stopped_run_says_it_was_interrupted_before_torchrun_exited_never_exit_none(tmp_path):
    stopped = stopped_after(tmp_path, 3)
    assert (stopped.status, stopped.exit_code, stopped.final_dir) == ("interrupted", None, None)
    judged = stage.summarize(stopped)
    assert judged.verdict == "INTERRUPTED" and "exit None" not in judged.summary
    assert ": interrupted before torchrun exited, loss " in judged.summary
    assert judged.summary.endswith("; stopped by a signal after step 3 (metrics and complete checkpoints kept)")
    before_any = stage.summarize(stopped_after(tmp_path / "b", 0))
    assert "exit None" not in before_any.summary and "before the first step" in before_any.summary
    # refused by the job's nodes (no exit code, not a Stop): no exit code said as such
    refused = stage.summarize(TrainResult("failed", None, 1.0, "node 1 never joined", stopped.plan))
    assert "no torchrun exit code" in refused.summary and "exit None" not in refused.summary


def test_the_results_table_of_a_stopped_run_says_why_it_has_no_exit_code(tmp_path):
    """The table says what the summary says, never ``None``."""
    from hyport_lib.train.show import summary_frame

    stopped = stopped_after(tmp_path, 3)
    table = dict(summary_frame(stopped).values.tolist())
    assert table["exit code"] == "interrupted before torchrun exited"
    refused = TrainResult("failed", None, 1.0, "node 1 never joined", stopped.plan)
    assert dict(summary_frame(refused).values.tolist())["exit code"] == "no torchrun exit code"
