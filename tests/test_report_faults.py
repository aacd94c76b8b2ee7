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


def _start(out: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, SECRET_NAME: SECRET}
    stderr = out / f"stderr-{time.monotonic_ns()}.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyport_lib", "report", "--profile", "default", "--only", "01,03",
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


@pytest.mark.parametrize("how, stage", [("SIGINT", "03_inference"), ("double-SIGINT", "03_inference"),
                                        ("SIGTERM", "01_environment"), ("SIGTERM", "03_inference")])
def test_a_stopped_run_tells_the_truth_and_leaves_nothing(how, stage, tmp_path):
    proc, stderr = _start(tmp_path)
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
        assert states == expected, states
        assert data["status"] == "interrupted" and data["ok"] is False
        index = (run_dir / "index.html").read_text()
        assert "INTERRUPTED" in index and "interrupted</b> by a stop signal" in index
        assert not (run_dir / ".partial").exists() or not any((run_dir / ".partial").iterdir())
        assert _leaks(run_dir) == []
        text = stderr.read_text(errors="replace")
        assert "Traceback" not in text and "ZMQError" not in text, text[-2000:]
    finally:
        _kill_all(_tree(proc.pid) + procs)


def test_sigkill_leaves_a_true_record_that_the_next_run_cleans(tmp_path):
    proc, _ = _start(tmp_path)
    procs = []
    try:
        run_dir, _ = _wait_for(tmp_path, "03_inference", workers=True)
        procs = _tree(proc.pid)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert _survivors(procs, grace=30) == [], "the kernel or a worker outlived a SIGKILL"
        data = json.loads((run_dir / "run.json").read_text())
        assert {s["stage"]: s["verdict"] for s in data["stages"]} == {
            "01_environment": "PASS", "03_inference": "RUNNING"}
        assert data["status"] == "running" and data["ok"] is False
        # The next command (here --clean; a next run does the same first) makes it true.
        clean = subprocess.run([sys.executable, "-m", "hyport_lib", "report", "--clean",
                                "--output-dir", str(tmp_path / "runs")],
                               env={**os.environ, SECRET_NAME: SECRET}, capture_output=True, text=True,
                               timeout=120)
        assert clean.returncode == 0 and "1 killed run(s) cleaned" in clean.stdout
        data = json.loads((run_dir / "run.json").read_text())
        assert {s["stage"]: s["verdict"] for s in data["stages"]} == {
            "01_environment": "PASS", "03_inference": "INTERRUPTED"}
        assert data["status"] == "killed" and "killed" in (run_dir / "index.html").read_text()
        assert not (run_dir / ".partial").exists()
        assert _leaks(run_dir) == []
        # And the next run works.
        nxt, _ = _start(tmp_path)
        assert nxt.wait(timeout=300) == 0
        new_dir, new = _run_json(tmp_path)
        assert new_dir != run_dir and new["status"] == "finished" and new["ok"] is True
        assert _leaks(new_dir) == []
    finally:
        _kill_all(_tree(proc.pid) + procs)


def test_a_run_still_alive_is_never_cleaned_by_another(tmp_path):
    proc, _ = _start(tmp_path)
    try:
        run_dir, _ = _wait_for(tmp_path, "01_environment", workers=False, timeout=120)
        clean = subprocess.run([sys.executable, "-m", "hyport_lib", "report", "--clean",
                                "--output-dir", str(tmp_path / "runs")], capture_output=True,
                               text=True, timeout=120)
        assert clean.returncode == 0 and "0 killed run(s) cleaned" in clean.stdout
        assert proc.wait(timeout=300) == 0
        assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    finally:
        _kill_all(_tree(proc.pid))
