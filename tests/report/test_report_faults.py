"""Fault injection: ``hyport report`` stopped by SIGINT, a double SIGINT, SIGTERM and SIGKILL
at several points of a run. After each: no process of the run survives, ``run.json`` and
the index tell the truth about every planned stage, no planted secret appears in any
form in any file (after SIGKILL: once the next command has cleaned up), and the next run
works. Bounded: every wait has a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hyport_lib.utils.redact import encoded_forms

pytestmark = pytest.mark.slow
SECRET_NAME = "HYPORT_FAULT_TEST_TOKEN"
SECRET = 'tok"en\\密钥-7f3a91'  # a quote, a backslash and Chinese: every escaping path


def _start(out: Path, *args: str, only: str = "01,03") -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, SECRET_NAME: SECRET}
    stderr = out / f"stderr-{time.monotonic_ns()}.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyport_lib", "report", "--profile", "default", "--only", only,
         "-p", f"single_prompt=Describe it for {SECRET}", "--output-dir", str(out / "runs"), *args],
        env=env, stdout=subprocess.DEVNULL, stderr=open(stderr, "wb"), cwd=out)
    return proc, stderr


def _run_json(out: Path) -> tuple[Path, dict]:
    runs = sorted((out / "runs").glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return Path(), {}
    try:
        return runs[-1].parent, json.loads(runs[-1].read_text())
    except json.JSONDecodeError:
        return runs[-1].parent, {}


def _wait_for(out: Path, stage: str, workers: bool, timeout: float = 120) -> tuple[Path, dict]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        run_dir, data = _run_json(out)
        states = {s["stage"]: s["verdict"] for s in data.get("stages", [])}
        if states.get(stage) == "RUNNING":
            logs = list((run_dir / "inference_logs").rglob("card*.log")) if run_dir.name else []
            if not workers or len(logs) >= 2:
                time.sleep(1.0 if workers else 0.5)  # well inside the stage
                return run_dir, data
        time.sleep(0.1)
    raise AssertionError(f"{stage} never ran (last run.json: {_run_json(out)[1]})")


def _tree(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent] + parent.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _survivors(procs: list[psutil.Process], grace: float = 15.0) -> list[str]:
    end = time.monotonic() + grace
    while time.monotonic() < end:
        alive = [p for p in procs if _alive(p)]
        if not alive:
            return []
        time.sleep(0.2)
    return [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in procs if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _leaks(run_dir: Path) -> list[str]:
    forms = [f.encode() for f in encoded_forms(SECRET)] + [SECRET_NAME.encode()]
    return [str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
            if p.is_file() and any(f in p.read_bytes() for f in forms)]


def _kill_all(procs):
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


#: Stopped in stage 03 after stage 01 finished, or in the run's first stage (01, or 03
#: alone): the finished stage stays PASS, the stopped one is INTERRUPTED, a later one NOT RUN.
STOPS = [("SIGINT", "03_inference", "01,03"), ("double-SIGINT", "03_inference", "03"),
         ("SIGTERM", "01_environment", "01,03"), ("SIGTERM", "03_inference", "03")]


@pytest.mark.parametrize("how, stage, only", STOPS, ids=[f"{h}-{s}-of-{o}" for h, s, o in STOPS])
def test_a_stopped_run_tells_the_truth_and_leaves_nothing(how, stage, only, tmp_path):
    proc, stderr = _start(tmp_path, only=only)
    procs = []
    try:
        run_dir, _ = _wait_for(tmp_path, stage, workers=stage == "03_inference")
        procs = _tree(proc.pid)
        if how == "double-SIGINT":
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)  # while the kernel and the workers are being stopped
            proc.send_signal(signal.SIGINT)
            time.sleep(0.7)
            proc.send_signal(signal.SIGINT)  # and one more, once it is all but done
        else:
            proc.send_signal(getattr(signal, how))
        assert proc.wait(timeout=120) == 130
        assert _survivors(procs) == [], "processes of the run survived"
        data = json.loads((run_dir / "run.json").read_text())
        states = {s["stage"]: s["verdict"] for s in data["stages"]}
        expected = {"01_environment": "INTERRUPTED", "03_inference": "NOT RUN"} if stage.startswith("01") \
            else {"01_environment": "PASS", "03_inference": "INTERRUPTED"}
        expected = {k: v for k, v in expected.items() if k[:2] in only.split(",")}
        assert states == expected, states
        assert data["status"] == "interrupted" and data["ok"] is False
        index = (run_dir / "index.html").read_text()
        assert "INTERRUPTED" in index and "interrupted</b> by a stop signal" in index
        assert not (run_dir / ".partial").exists() and not (run_dir / ".runner.lock").exists()
        assert _leaks(run_dir) == []
        text = stderr.read_text(errors="replace")
        assert "Traceback" not in text and "ZMQError" not in text, text[-2000:]
    finally:
        _kill_all(_tree(proc.pid) + procs)


def _clean(out: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hyport_lib", "report", "--clean",
                           "--output-dir", str(out / "runs")], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def killed_then_next(tmp_path_factory) -> dict:
    """What the two tests below check, seen in one sequence of runs into one folder (one
    launch less than a fresh run for each): a run SIGKILLed in stage 03; ``--clean`` after
    it; the next run, against which another ``--clean`` is run while it is in stage 01;
    that next run's end. Each step is recorded, not asserted, so that both tests report
    what they check."""
    out = tmp_path_factory.mktemp("killed")
    seen: dict = {}
    proc, _ = _start(out)
    procs, nxt = [], None
    try:
        run_dir, _ = _wait_for(out, "03_inference", workers=True)
        seen["run_dir"] = run_dir
        procs = _tree(proc.pid)
        proc.send_signal(signal.SIGKILL)
        seen["killed_exit"] = proc.wait(timeout=30)
        seen["survivors"] = _survivors(procs, grace=30)
        seen["killed"] = json.loads((run_dir / "run.json").read_text())
        # The next command (here --clean; a next run does the same first) makes it true.
        seen["clean"] = _clean(out, {**os.environ, SECRET_NAME: SECRET})
        seen["cleaned"] = json.loads((run_dir / "run.json").read_text())
        seen["cleaned_index"] = (run_dir / "index.html").read_text()
        seen["partial_left"] = (run_dir / ".partial").exists()
        seen["lock_left"] = (run_dir / ".runner.lock").exists()
        seen["killed_leaks"] = _leaks(run_dir)
        # And the next run: a --clean while it runs, then its end.
        nxt, _ = _start(out)
        alive_dir, _ = _wait_for(out, "01_environment", workers=False, timeout=120)
        seen["alive_dir"] = alive_dir
        seen["clean_while_alive"] = _clean(out, dict(os.environ))
        seen["next_exit"] = nxt.wait(timeout=300)
        seen["next_dir"], seen["next"] = _run_json(out)
        seen["alive_status"] = json.loads((alive_dir / "run.json").read_text())["status"]
        seen["next_leaks"] = _leaks(seen["next_dir"])
        seen["next_left"] = sorted(p.name for p in seen["next_dir"].glob(".*"))
    finally:
        _kill_all(_tree(proc.pid) + procs + (_tree(nxt.pid) if nxt else []))
    return seen


def test_sigkill_leaves_a_true_record_that_the_next_run_cleans(killed_then_next):
    seen = killed_then_next
    run_dir = seen["run_dir"]
    assert seen["killed_exit"] == -signal.SIGKILL
    assert seen["survivors"] == [], "the kernel or a worker outlived a SIGKILL"
    data = seen["killed"]
    assert {s["stage"]: s["verdict"] for s in data["stages"]} == {
        "01_environment": "PASS", "03_inference": "RUNNING"}
    assert data["status"] == "running" and data["ok"] is False
    clean = seen["clean"]
    assert clean.returncode == 0 and "1 killed run cleaned" in clean.stdout
    data = seen["cleaned"]
    assert {s["stage"]: s["verdict"] for s in data["stages"]} == {
        "01_environment": "PASS", "03_inference": "INTERRUPTED"}
    assert data["status"] == "killed" and "killed" in seen["cleaned_index"]
    assert not seen["partial_left"] and not seen["lock_left"]
    assert seen["killed_leaks"] == []
    # And the next run works.
    assert seen["next_exit"] == 0
    new_dir, new = seen["next_dir"], seen["next"]
    assert new_dir != run_dir and new["status"] == "finished" and new["ok"] is True
    assert seen["next_leaks"] == []
    assert seen["next_left"] == []  # neither .partial/ nor .runner.lock


def test_a_run_still_alive_is_never_cleaned_by_another(killed_then_next):
    seen = killed_then_next
    assert seen["alive_dir"] == seen["next_dir"] != seen["run_dir"]
    clean = seen["clean_while_alive"]
    assert clean.returncode == 0 and "0 killed runs cleaned" in clean.stdout
    assert seen["next_exit"] == 0
    assert seen["alive_status"] == "finished"


@pytest.mark.parametrize("where", ["hold_run_lock", "process_start_time"])
def test_a_stop_before_the_run_wrote_anything_leaves_no_folder(where, tmp_path, monkeypatch):
    """A Ctrl-C landing right after the run folder was made (taking its lock, or while the
    run's record is built): no lock, no empty folder, nothing for a later --clean to find."""
    from hyport_lib.report import runner

    real = getattr(runner, where)
    calls = []

    def stopped_after(*args, **kwargs):
        calls.append(real(*args, **kwargs))  # the lock is really taken, then the stop lands
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, where, stopped_after)
    with pytest.raises(KeyboardInterrupt):
        runner.run_report(profile=None, only=["01"], output_root=tmp_path / "runs")
    assert calls and list((tmp_path / "runs").iterdir()) == []
