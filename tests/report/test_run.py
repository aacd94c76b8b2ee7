"""A report run as the runner fills it and the pages read it (hyport_lib/report/run.py)."""

from __future__ import annotations

import json
import os

from hyport_lib.report.run import (RESULTS_DIR, ReportRun, StageOutcome, load_views, new_run_dir,
                                   run_folder_env)
from hyport_lib.results import RESULTS_DIR_ENV, RUN_DIR_ENV, Provenance


def test_run_dirs_are_unique(tmp_path):
    ids = {new_run_dir(tmp_path)[0] for _ in range(20)}
    assert len(ids) == 20


def test_the_run_folder_is_set_for_the_block_and_put_back_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_DIR_ENV, "/before")
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    monkeypatch.delenv("HYPORT_TEST_EXTRA", raising=False)
    try:
        with run_folder_env(tmp_path, {"HYPORT_TEST_EXTRA": "1"}):
            assert os.environ[RUN_DIR_ENV] == str(tmp_path)
            assert os.environ[RESULTS_DIR_ENV] == str(tmp_path / RESULTS_DIR)
            assert os.environ["HYPORT_TEST_EXTRA"] == "1"
            raise KeyError("the block fails")
    except KeyError:
        pass
    assert os.environ[RESULTS_DIR_ENV] == "/before" and RUN_DIR_ENV not in os.environ
    assert "HYPORT_TEST_EXTRA" not in os.environ


def test_run_json_reads_back_as_the_run_and_a_finished_run_with_a_fail_is_not_ok(tmp_path):
    run = ReportRun("r1", tmp_path, None, {"device": "cpu"},
                    [StageOutcome("01_environment", "PASS", provenance=Provenance("cpu")),
                     StageOutcome("04_train", "FAIL")], {}, "t", status="finished")
    data = json.loads(json.dumps(run.to_dict()))
    assert data["ok"] is False and data["run_dir"] == str(tmp_path)
    back = ReportRun.from_dict(data)
    assert back == run and back.stages[0].provenance.label.startswith("CPU")
    run.stages[1].verdict = "WARN"
    assert run.ok and not ReportRun.from_dict({**run.to_dict(), "status": "interrupted"}).ok


def test_each_planned_stage_is_read_once_and_an_odd_file_is_no_record(tmp_path):
    (tmp_path / RESULTS_DIR).mkdir()
    (tmp_path / RESULTS_DIR / "01_environment.json").write_text(json.dumps(
        {"stage": "01_environment", "verdict": "PASS", "headline": {"checks": 3}, "data": {"device": "cpu"}}))
    (tmp_path / RESULTS_DIR / "03_inference.json").write_text("{ half a file")
    run = ReportRun("r1", tmp_path, None, {}, [StageOutcome("01_environment", "PASS"),
                                               StageOutcome("03_inference", "FAIL"),
                                               StageOutcome("04_train", "PENDING", headline={"steps": 0})],
                    {}, "t")
    recorded, odd, pending = load_views(run)
    assert recorded.has_data and recorded.headline == {"checks": 3} and recorded.number == "01"
    assert odd.record is None and "03_inference.json" in odd.problem and not odd.has_data
    assert pending.record is None and not pending.finished and pending.headline == {"steps": 0}
