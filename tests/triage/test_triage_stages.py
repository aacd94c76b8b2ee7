"""Stages 03 and 04 read the logs of a card or rank that failed (hyport_lib.triage).

A CPU cannot fail the way an NPU does, so the workers replay a real failure: the lines
of a vendored log (``tests/data/npu_logs/``, copied from a public issue thread) written
to the worker's stderr, then an exception (``tests/fault_injection/hyport_faults.py``). What the
stage records, shows on the index card and prints in its notebook page must be the
diagnosis of those lines, with the file and line where they were found.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.inference import grid, show as inference_show, stage as inference
from hyport_lib.inference.grid import run_grid
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.stages import read_stage_record
from hyport_lib.train import show as train_show
from hyport_lib.train.launch import launch_logs
from hyport_lib.triage import Triage

from fault_injection.hyport_faults import (FAULT_ENV, REPLAY_FAULT_ENV, ReplayedFailure, parse_faults,
                                           parse_replay_switch, replay_failure, with_fault_switches)
from tests.fixtures_runs import run_report_command


LOGS = Path(__file__).parents[1] / "data" / "npu_logs"


OOM_LOG = LOGS / "npu_oom.llama-factory-5491.log"
HCCL_TIMEOUT_LOG = LOGS / "hccl_exec_timeout.vllm-ascend-382.log"


def test_replay_writes_the_real_lines_then_raises(tmp_path):
    stream = io.StringIO()
    with pytest.raises(ReplayedFailure, match="npu_oom.llama-factory-5491.log"):
        replay_failure(OOM_LOG, "SWITCH", stream)
    assert stream.getvalue().rstrip("\n") == OOM_LOG.read_text(encoding="utf-8").rstrip("\n")
    with pytest.raises(FileNotFoundError, match="SWITCH: no log to replay"):
        replay_failure(tmp_path / "missing.log", "SWITCH", stream)


def test_the_grid_fault_switch_keeps_the_replayed_path_as_written():
    path = "/Data/Logs/NPU_OOM.log"
    assert parse_faults(f"0:replay={path}, 1:RAISE") == {0: f"replay={path}", 1: "raise"}
    with pytest.raises(ValueError, match="replay=<log file>"):
        parse_faults("0:replay=")


@pytest.mark.slow
def test_a_failed_card_gets_the_diagnosis_of_its_log(fake_npu, fault_switches, monkeypatch, tmp_path):
    """Card 0 dies with a real NPU out-of-memory traceback; card 1 with an error no
    catalogue entry knows, which is shown as not recognised, never guessed at."""
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")
    monkeypatch.delenv("ASCEND_PROCESS_LOG_PATH", raising=False)
    # Card 1's own CANN folder holds a real AI Core fault written "during" the run: it is
    # card 1's diagnosis, never card 0's (cards run side by side).
    plog = tmp_path / "logs" / "cann" / "card1" / "debug" / "plog" / "plog-4242_20261202.log"
    plog.parent.mkdir(parents=True)
    secret = "s3cr3t-vAlue-9137"  # the job's own secret, passed only to the workers
    plog.write_text((LOGS / "aicore_exception.torch_npu-66.log").read_text(encoding="utf-8")
                    + f"[INFO] connecting with {secret}\n", encoding="utf-8")
    os.utime(plog, (time.time() + 60, time.time() + 60))
    replay = tmp_path / "oom_with_secret.log"
    replay.write_text(OOM_LOG.read_text(encoding="utf-8") + f"token in use: {secret}\n", encoding="utf-8")
    plan = inference.plan(InferenceParams(device="npu", max_new_tokens=4, infer_timeout_s=60,
                                          log_dir=str(tmp_path / "logs")))
    result = run_grid(plan, extra_env={FAULT_ENV: f"0:replay={replay},1:raise", "JOB_API_KEY": secret})

    rows = {int(r["card"]): r for r in result.frame.to_dict(orient="records")}
    assert rows[0]["status"] == rows[1]["status"] == "failed"
    assert rows[0]["error"].startswith("ReplayedFailure")
    assert rows[0]["diagnosis"].startswith("device out of memory (card0.log:")

    record = result.to_dict()
    oom = Triage.from_dict(record["diagnoses"]["0"])
    assert [f.key for f in oom.findings] == ["npu_out_of_memory"]
    finding = oom.findings[0]
    log_lines = (tmp_path / "logs" / "card0.log").read_text(encoding="utf-8").splitlines()
    assert "NPU out of memory" in log_lines[finding.line - 1] and finding.file == "card0.log"
    assert "PYTORCH_NPU_ALLOC_CONF" in finding.action
    assert oom.cann_log_dir == str(tmp_path / "logs" / "cann" / "card0")
    card1 = Triage.from_dict(record["diagnoses"]["1"])
    assert card1.cann_log_dir == str(tmp_path / "logs" / "cann" / "card1")
    assert [f.key for f in card1.findings] == ["aicore_exception"]
    assert card1.findings[0].file.endswith("plog-4242_20261202.log")
    # The worker's own error is no known failure: shown as not recognised, not guessed at.
    assert any("injected test fault on card 1" in text for u in card1.unrecognised for _, text in u.lines)

    card = dict(inference_show.glance(read_stage_record("03_inference", {"headline": {}, "data": record})))
    assert card["card 0 diagnosis"] == rows[0]["diagnosis"]
    # Neither the record nor the card's own CANN log keeps the job's secret.
    assert secret not in json.dumps(record) and secret not in plog.read_text(encoding="utf-8")
    assert not any("shared with the other cards" in n for n in oom.notes + card1.notes)


def test_a_grid_worker_keeps_the_users_cann_folder_and_says_it_is_shared(fake_npu, monkeypatch, tmp_path):
    started = {}

    def fake_start(cmd, *, env, **kwargs):
        started["env"] = env
        return SimpleNamespace(proc=None, log_path=kwargs["log_path"], started=0.0, deadline=None)

    group = SimpleNamespace(start=fake_start)
    monkeypatch.delenv("ASCEND_PROCESS_LOG_PATH", raising=False)
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")
    npu = get_backend("npu")
    own = grid._launch(group, npu, 1, {}, tmp_path, 5.0, None, {})
    assert started["env"]["ASCEND_PROCESS_LOG_PATH"] == str(tmp_path / "cann" / "card1")
    assert own.cann_dir == tmp_path / "cann" / "card1" and own.cann_dir.is_dir() and not own.cann_shared
    users = grid._launch(group, npu, 1, {}, tmp_path, 5.0, {"ASCEND_PROCESS_LOG_PATH": "/var/log/npu"}, {})
    assert started["env"]["ASCEND_PROCESS_LOG_PATH"] == "/var/log/npu"
    assert users.cann_dir == Path("/var/log/npu") and users.cann_shared
    cpu = grid._launch(group, get_backend("cpu"), 0, {}, tmp_path / "cpu", 5.0, None, {})  # no CANN on a CPU
    assert cpu.cann_dir is None and not cpu.cann_shared and not (tmp_path / "cpu" / "cann").exists()
    assert "ASCEND_PROCESS_LOG_PATH" not in started["env"]


def test_an_unreadable_diagnosis_costs_the_index_card_only_its_own_line():
    record = {"headline": {"exit code": 1}, "data": {"diagnosis": {"findings": "not a list"}}}
    card = dict(train_show.glance(read_stage_record("04_train", record)))
    assert card["exit code"] == "1" and "diagnosis" not in card  # the reader leaves it out


def test_a_malformed_replay_switch_names_itself():
    with pytest.raises(ValueError, match=f"{REPLAY_FAULT_ENV}='1:x.log': expected <step>:<rank>:<log file>"):
        parse_replay_switch("1:x.log")


def test_a_launch_is_diagnosed_from_its_own_rank_logs(tmp_path):
    """An earlier launch into the same folder left rank logs with another failure."""
    ranks = tmp_path / "logs" / "ranks"
    old = ranks / "none_a1" / "attempt_0" / "0" / "stderr.log"
    new = ranks / "none_k3" / "attempt_0" / "1" / "stderr.log"
    for path in (old, new):
        path.parent.mkdir(parents=True)
        path.write_text("RuntimeError: boom\n", encoding="utf-8")
    started = time.time()
    os.utime(old, (started - 86400, started - 86400))
    torchrun_log = tmp_path / "logs" / "torchrun.log"
    assert launch_logs(tmp_path, torchrun_log, started - 2) == [torchrun_log, new]


@pytest.fixture(scope="module")
def failed_training_report(tmp_path_factory):
    """``hyport report --only 04`` (2 steps, one process: the cheapest real launch) whose
    rank fails after step 1 with a real HCCL watchdog timeout replayed into its log."""
    out = tmp_path_factory.mktemp("failed-training-report")
    env = with_fault_switches({k: v for k, v in os.environ.items() if k != "ASCEND_PROCESS_LOG_PATH"})
    env[REPLAY_FAULT_ENV] = f"1:0:{HCCL_TIMEOUT_LOG}"
    proc, run_dir = run_report_command(out, "--only", "04", "-p", "max_steps=2", "-p", "num_cards=1",
                                       "-p", "zero_stage=0", "-p", "gradient_checkpointing=false", env=env)
    return proc, run_dir


@pytest.mark.slow
def test_a_failed_rank_is_diagnosed_in_the_result_and_the_report(failed_training_report):
    proc, run_dir = failed_training_report
    assert proc.returncode != 0, proc.stdout + proc.stderr
    record = json.loads((run_dir / "results" / "04_train.json").read_text(encoding="utf-8"))
    data = record["data"]
    assert data["status"] == "failed" and record["verdict"] == "FAIL"
    found = Triage.from_dict(data["diagnosis"])
    assert "hccl_exec_timeout" in [f.key for f in found.findings]
    timeout = next(f for f in found.findings if f.key == "hccl_exec_timeout")
    # Found where the rank wrote it: the line it names holds the replayed text.
    log = Path(data["plan"]["output_dir"]) / "logs" / timeout.file if found.root is None \
        else Path(found.root) / timeout.file
    assert timeout.text.strip() in log.read_text(encoding="utf-8").splitlines()[timeout.line - 1]
    assert "diagnosis: HCCL collective timed out" in data["why"]
    # A CPU run writes no CANN logs: none are read, and no folder is made for them.
    assert found.cann_log_dir is None
    assert not (Path(data["plan"]["output_dir"]) / "logs" / "cann").exists()

    card = dict(train_show.glance(read_stage_record("04_train", record)))
    assert card["diagnosis"].startswith("HCCL collective timed out")
    index = (run_dir / "index.html").read_text(encoding="utf-8")
    assert "HCCL collective timed out" in index
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "HCCL_EXEC_TIMEOUT" in page and timeout.where in page
