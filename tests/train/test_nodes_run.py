"""Stage 04 on two "nodes" of one machine (docs/nodes.md): node 0 here (``stage.run``), node 1 a
``hyport train`` process, each one CPU rank, torchrun's c10d rendezvous on 127.0.0.1 with short
timeouts. A node that never joins, dies or freezes is named; a different parameter, version or
output_dir is refused before any model loads; the happy run leaves one record (node 0's, with a
row per node) and node 1 an honest summary; the resume point is node 0's."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hyport_lib.train import stage
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import free_port
from hyport_lib.train.show import progress_line

pytestmark = pytest.mark.slow
JOIN_S = 15
NODE_S = 10


def _params(out: Path, port: int, **overrides) -> Params:
    values = dict(output_dir=str(out), num_cards=1, nnodes=2, node_rank=0, master_port=port, max_steps=3,
                  resume_from="none", join_timeout_s=JOIN_S, node_timeout_s=NODE_S, train_timeout_s=300)
    values.update(overrides)
    return Params(**values)


def _start_node1(out: Path, port: int, *flags: str, env=None, **overrides) -> subprocess.Popen:
    params = _params(out, port, node_rank=1, **overrides)
    words = []
    names = ("output_dir", "num_cards", "nnodes", "node_rank", "master_port", "max_steps", "resume_from",
             "join_timeout_s", "node_timeout_s", "train_timeout_s", *overrides)
    for name in dict.fromkeys(names):
        words += [f"--{name.replace('_', '-')}", str(getattr(params, name))]
    return subprocess.Popen([sys.executable, "-m", "hyport_lib", "train", "--no-record", "--json", *words, *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})


def _answer(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = proc.communicate(timeout=timeout)
    start = out.find("\n{")
    assert start >= 0 or out.startswith("{"), (out[-2000:], err[-3000:])
    return json.loads(out[start + 1 if start >= 0 else 0:])


def _kill(proc: subprocess.Popen) -> None:
    """The node's launcher and everything it started (its torchrun, ranks and guards)."""
    if proc.poll() is not None:
        return
    try:
        family = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        family = []
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def happy(tmp_path_factory):
    """One two-node job into one shared folder (checkpoints at steps 2 and 4)."""
    out, port = tmp_path_factory.mktemp("shared") / "job", free_port()
    second = _start_node1(out, port, max_steps=4, save_steps=2)
    try:
        first = stage.run(stage.plan(_params(out, port, max_steps=4, save_steps=2)))
        other = _answer(second)
    finally:
        _kill(second)
    return first, other


def test_a_node_that_never_joins_is_named_within_the_join_timeout(tmp_path):
    lines = []
    plan = stage.plan(_params(tmp_path / "job", free_port()))
    started = time.monotonic()
    result = stage.run(plan, on_progress=lambda p: lines.append(progress_line(p)))
    named_after = time.monotonic() - started
    print(f"CPU: node 0's named join failure {named_after:.1f} s after start (join_timeout_s={JOIN_S})")
    assert result.status == "failed"
    assert result.reason.startswith(f"1 of 2 nodes joined within join_timeout_s={JOIN_S}: node 1 never arrived; "
                                    "start node_rank 1 with: hyport train "), result.reason
    command = result.reason.split(" with: ", 1)[1].split()
    assert " ".join(command[command.index("--nnodes"):][:2]) == "--nnodes 2"
    assert " ".join(command[command.index("--node-rank"):][:2]) == "--node-rank 1"
    assert " ".join(command[command.index("--master-port"):][:2]) == f"--master-port {plan.master_port}"
    assert named_after <= JOIN_S + 30
    assert any(line.startswith("waiting for node 1") for line in lines), lines[:3]
    assert [(row.node_rank, row.status) for row in result.nodes] == [(0, "failed"), (1, "never joined")]
    assert stage.summarize(result).verdict == "FAIL"


def test_two_nodes_leave_one_record_and_node_1_claims_nothing(happy):
    first, other = happy
    judged = stage.summarize(first)
    assert judged.verdict == "PASS", (first.reason, judged.why)
    assert [r.step for r in first.metrics] == [1, 2, 3, 4] and first.metrics[0].world_size == 2
    assert first.final_dir
    assert [(row.node_rank, row.status, row.exit_code) for row in first.nodes] == [(0, "ok", 0), (1, "ok", 0)]
    assert sorted(r for row in first.nodes for r in row.ranks) == [0, 1]
    assert all(row.host and row.log_path.endswith(f"node{row.node_rank}.log") for row in first.nodes)
    assert first.nodes[1].versions_differ == [] and first.nodes[0].versions["torch"]
    assert other["verdict"] == "PASS"
    assert re.fullmatch(r"node 1 of 2 \(host .+\): 1 rank exited 0; the job's record is node 0's \(.+\)",
                        other["why"]), other["why"]
    assert other["metrics"] == [] and other["final_dir"] is None
    assert other["checkpoints"] == [] and "final weights" not in other["why"]


def test_the_resume_point_is_node_0s_on_every_rank(happy, tmp_path):
    """Node 0 resumes checkpoint-2 by name; node 1's own 'auto' would take checkpoint-4."""
    first, _ = happy
    out, port = Path(first.plan.output_dir), free_port()
    chosen = str(out / "checkpoint-2")
    second = _start_node1(out, port, resume_from="auto", overwrite_output_dir=True, max_steps=5, save_steps=100)
    try:
        again = stage.run(stage.plan(_params(out, port, resume_from=chosen, overwrite_output_dir=True,
                                             max_steps=5, save_steps=100)))
        other = _answer(second)
    finally:
        _kill(second)
    assert other["plan"]["resume_checkpoint"].endswith("checkpoint-4")  # node 1's own answer
    assert again.status == "ok", again.reason
    assert again.worker.resumed_step == 2 and [r.step for r in again.metrics] == [1, 2, 3, 4, 5]


def _refused(tmp_path, out1=None, env=None, node1_env=None, **node1) -> tuple[str, dict]:
    out, port = tmp_path / "job", free_port()
    second = _start_node1(out1 or out, port, env=node1_env, **node1)
    try:
        result = stage.run(stage.plan(_params(out, port)))
        other = _answer(second)
    finally:
        _kill(second)
    assert result.status == "failed" and stage.summarize(result).verdict == "FAIL"
    assert other["verdict"] == "FAIL" and other["why"] == result.reason, (other["why"], result.reason)
    assert not result.metrics
    # node 0's table: the refused node says so; node 0 itself failed with it
    assert [(row.node_rank, row.status) for row in result.nodes] == [(0, "failed"), (1, "refused")]
    return result.reason, other


def test_a_different_parameter_is_refused_naming_the_node_and_field(tmp_path):
    reason, _ = _refused(tmp_path, learning_rate=0.0002)
    assert re.fullmatch(r"node 1 \(host .+\): learning_rate differs: 0.0001 on node 0, 0.0002 on node 1", reason)


def test_an_unshared_output_dir_is_refused(tmp_path):
    reason, _ = _refused(tmp_path, out1=tmp_path / "elsewhere")
    assert re.match(r"node 1 \(host .+\): does not see node 0's token in output_dir='.*elsewhere'", reason), reason
    assert "storage='node_local'" in reason


def test_a_different_cann_version_is_refused(tmp_path, monkeypatch):
    """Each node's CANN as collect_cann reads it: ascend_toolkit_install.info under ASCEND_HOME_PATH."""
    homes = {}
    for name, version in (("a", "8.0.RC3"), ("b", "8.1.RC1")):
        homes[name] = tmp_path / f"cann-{name}"
        homes[name].mkdir()
        (homes[name] / "ascend_toolkit_install.info").write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(homes["a"]))
    reason, _ = _refused(tmp_path, node1_env={"ASCEND_HOME_PATH": str(homes["b"])})
    assert re.fullmatch(r"node 1 \(host .+\): CANN differs: 8.0.RC3 on node 0, 8.1.RC1 on node 1", reason), reason


def _after_first_step(out: Path, then) -> threading.Thread:
    def watch():
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (metrics.is_file() and metrics.read_text().strip()):
            time.sleep(0.2)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_node_that_dies_or_freezes_is_named(how, tmp_path):
    out, port = tmp_path / "job", free_port()
    second = _start_node1(out, port, max_steps=500)

    def stop_node1():
        if how == "killed":
            _kill(second)
            return
        for process in [psutil.Process(second.pid), *psutil.Process(second.pid).children(recursive=True)]:
            process.send_signal(signal.SIGSTOP)

    try:
        watcher = _after_first_step(out, stop_node1)
        result = stage.run(stage.plan(_params(out, port, max_steps=500)))
        watcher.join(timeout=5)
    finally:
        _kill(second)
    assert result.status == "failed"
    assert re.fullmatch(rf"node 1 \(host [^,]+, rank [01]\) stopped answering \d+ s ago \(node_timeout_s={NODE_S}\)",
                        result.reason), result.reason
    assert result.metrics  # it trained before
