"""hyport_lib.processes: children in their own group, fed over a lifeline, never outliving
the launcher, stopped as a whole, their logs scrubbed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from hyport_lib import processes as P
from hyport_lib.utils.scrub_log import scrub_log

CHILD = textwrap.dedent("""
    import subprocess, sys, time
    from hyport_lib.processes import start_guard
    line = sys.stdin.readline()
    print("got", line.strip(), flush=True)
    guard = start_guard()
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("grandchild", grandchild.pid, "guard", guard, flush=True)
    time.sleep(600)
""")


def _env():
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _wait_for(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _pids(log):
    for line in log.read_text().splitlines():
        if line.startswith("grandchild"):
            parts = line.split()
            return int(parts[1])
    return None


@pytest.mark.slow
def test_payload_reaches_the_child_and_cutting_the_lifeline_ends_its_group(tmp_path):
    log = tmp_path / "child.log"
    child = P.start_child([sys.executable, "-c", CHILD], env=_env(), log_path=log,
                          payload=b'{"hello": 1}\n', timeout_s=60, name="test")
    try:
        assert os.getpgid(child.pid) == child.pid  # its own group
        assert _wait_for(lambda: _pids(log) is not None), log.read_text()
        grandchild = _pids(log)
        assert 'got {"hello": 1}' in log.read_text()
        assert not P.has_exited(child.proc)
        P.cut_lifeline(child)  # as if the launcher died: the guard kills the whole group
        assert _wait_for(lambda: P.has_exited(child.proc))
        assert _wait_for(lambda: not psutil.pid_exists(grandchild) or
                         psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE)
        assert P.finish(child) == -signal.SIGKILL
        assert "SIGKILL" in P.describe_exit(child.proc.returncode)
    finally:
        if child.proc.returncode is None:
            P.kill_groups([child], grace_s=0)
            P.finish(child)


@pytest.mark.slow
def test_kill_groups_stops_the_child_and_what_it_started(tmp_path):
    log = tmp_path / "child.log"
    child = P.start_child([sys.executable, "-c", CHILD], env=_env(), log_path=log,
                          payload=b"x\n", name="test")
    assert _wait_for(lambda: _pids(log) is not None), log.read_text()
    grandchild = psutil.Process(_pids(log))
    P.kill_groups([child], grace_s=0.5)
    assert _wait_for(lambda: P.has_exited(child.proc))
    P.finish(child)
    assert _wait_for(lambda: not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE)


@pytest.mark.slow
def test_reap_leftovers_kills_what_an_exited_leader_left_behind(tmp_path):
    log = tmp_path / "child.log"
    code = ("import subprocess, sys; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print('grandchild', p.pid, flush=True)")
    child = P.start_child([sys.executable, "-c", code], env=_env(), log_path=log, name="leader")
    assert _wait_for(lambda: P.has_exited(child.proc))
    grandchild = psutil.Process(_pids(log))
    assert grandchild.is_running()
    P.reap_leftovers(child)
    assert _wait_for(lambda: not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE)
    assert P.finish(child) == 0


@pytest.mark.slow
def test_a_child_that_never_reads_does_not_block_the_launcher(tmp_path):
    big = b"x" * (4 * 1024 * 1024)  # far more than a pipe holds
    started = time.monotonic()
    child = P.start_child([sys.executable, "-c", "import time; time.sleep(0.2)"], env=_env(),
                          log_path=tmp_path / "c.log", payload=big)
    assert time.monotonic() - started < 5 and child.unsent  # not all of it was taken
    assert _wait_for(lambda: P.has_exited(child.proc))
    P.feed(child)  # the reader is gone: the rest is dropped, no exception
    assert child.unsent == b""
    assert P.finish(child) == 0


@pytest.mark.slow
def test_guard_refuses_when_not_a_group_leader(tmp_path):
    code = "from hyport_lib.processes import start_guard; print('guard', start_guard())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), timeout=60)
    assert "guard None" in out.stdout and "not a process-group leader" in out.stdout


def test_logs_are_scrubbed_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_TEST_API_TOKEN", "tok-secret-123")
    log = tmp_path / "x.log"
    log.write_text("line 1\nuses tok-secret-123\nValueError: bad tok-secret-123\n")
    assert scrub_log(log) is True
    assert "tok-secret-123" not in log.read_text()
    assert P.read_log_tail(log, 1) == "ValueError: bad [redacted]"
    assert P.last_exception(log.read_text()) == "ValueError: bad [redacted]"
    assert P.read_log_tail(tmp_path / "missing.log") == ""


def test_a_log_tail_shows_a_progress_bar_as_a_terminal_does(tmp_path):
    log = tmp_path / "card0.log"
    log.write_bytes(b"loading\r\n  0%|          | 0/2 [00:00<?, ?it/s]\r 50%|#####     | 1/2\r"
                    b"100%|##########| 2/2 [00:01<00:00]\nwarm-up done\n")
    assert P.read_log_tail(log, 5).splitlines() == [
        "loading", "100%|##########| 2/2 [00:01<00:00]", "warm-up done"]


@pytest.mark.parametrize("code, words", [(0, "exit code 0"), (3, "exit code 3"),
                                         (-9, "SIGKILL"), (-15, "SIGTERM"), (-99, "signal 99 (-99)"),
                                         (None, "running")])
def test_describe_exit(code, words):
    assert words in P.describe_exit(code)


#: A child that touches 96 MiB, then SIGKILLs itself: killed, as the OOM killer kills, without
#: running out of memory.
SELF_KILL = ("import os, signal; block = bytearray(96 << 20); block[::4096] = b'x' * len(block[::4096]); "
             "os.kill(os.getpid(), signal.SIGKILL)")


@pytest.mark.slow
def test_a_child_that_sigkills_itself_is_not_said_out_of_memory(tmp_path):
    ended = P.run_child([sys.executable, "-c", SELF_KILL], env=_env(), log_path=tmp_path / "c.log",
                        timeout_s=60, poll_interval_s=0.02, kill_grace_s=1.0)
    child = ended.child
    assert ended.code == -signal.SIGKILL and not ended.timed_out
    assert child.memory_before is not None and child.memory_after is not None
    assert child.memory_before.oom_kills == child.memory_after.oom_kills  # None where there is no cgroup
    assert child.peak_rss.bytes >= 96 << 20  # its exact peak, from wait4 when it was reaped
    diagnosis = child.kill_diagnosis(ended.code)
    assert diagnosis is not None and not diagnosis.out_of_memory
    said = P.describe_exit(ended.code, child)
    assert said.startswith("killed by signal SIGKILL (-9); ")
    assert "; no sign of memory exhaustion (peak RSS " in said, said
    assert re.search(r"peak RSS \d+\.\d GiB of (the )?\d+\.\d GiB", said), said
    assert child.kill_diagnosis(0) is None and P.describe_exit(0, child) == "exit code 0"


# --------------------------------------------------------------------------- child tasks
TASKS = '''
def echo(spec):
    return {"echo": spec}


def fail(spec):
    raise RuntimeError(f"first line {spec['token']}\\nsecond line")


def progress(spec):
    from tqdm import tqdm
    from transformers.utils import logging

    for _ in tqdm(range(3), desc="plain tqdm"):
        pass
    for _ in logging.tqdm(range(3), desc="Loading weights"):
        pass
    return {"transformers_bars": logging.is_progress_bar_enabled()}
'''
SECRET = "tok-secret-of-the-task-123"


def _run_task(tmp_path, monkeypatch, target, spec, payload=None, **options):
    """``target`` of a module in ``tmp_path`` run through the one child runner: (exit status,
    result, log text)."""
    monkeypatch.setenv("HYPORT_TEST_API_TOKEN", SECRET)
    (tmp_path / "hyport_test_tasks.py").write_text(TASKS)
    env = P.task_environ()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    result, log = tmp_path / f"{target}.json", tmp_path / f"{target}.log"
    cmd, spec_line = P.task_command(f"hyport_test_tasks:{target}", spec, result, label="[hyport test]",
                                    **options)
    ended = P.run_child(cmd, env=env, log_path=log, payload=payload or spec_line, timeout_s=60,
                        poll_interval_s=0.05, kill_grace_s=1.0)
    return ended.code, P.read_task_result(result), log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("teardown", [False, True])
def test_a_task_returns_its_result_scrubbed_with_the_child_facts(tmp_path, monkeypatch, teardown):
    code, result, log = _run_task(tmp_path, monkeypatch, "echo", {"n": 1, "token": SECRET},
                                  teardown=teardown)
    assert code == 0
    assert result["status"] == "ok" and result["echo"] == {"n": 1, "token": "[redacted]"}
    assert set(P.TASK_FIELDS) <= set(result) and result["pid"] > 0 and result["peak_rss_bytes"] > 2**20
    assert f"[hyport test] pid {result['pid']} visible " in log and " guard pid " in log
    assert "[hyport test] ok in " in log and SECRET not in log


@pytest.mark.slow
def test_a_task_that_raises_is_a_failed_result_of_one_line(tmp_path, monkeypatch):
    code, result, log = _run_task(tmp_path, monkeypatch, "fail", {"token": SECRET})
    assert code == 1
    assert {k: result[k] for k in ("status", "error_type", "error")} == {
        "status": "failed", "error_type": "RuntimeError", "error": "first line [redacted]"}
    assert "Traceback" in log and "second line" in log and SECRET not in log
    assert "[hyport test] failed in " in log


@pytest.mark.slow
def test_a_task_writes_no_progress_bar_into_its_log(tmp_path, monkeypatch):
    code, result, log = _run_task(tmp_path, monkeypatch, "progress", {})
    assert code == 0 and result["transformers_bars"] is False
    assert "\r" not in log and "plain tqdm" not in log and "Loading weights" not in log


@pytest.mark.slow
def test_a_spec_that_is_no_json_is_a_failed_result(tmp_path, monkeypatch):
    code, result, _ = _run_task(tmp_path, monkeypatch, "echo", {}, payload=b"{not json\n")
    assert code == 1 and result["status"] == "failed" and result["error_type"] == "ValueError"
    assert result["error"].startswith("the task's spec on stdin is not JSON")


def test_the_task_command_names_the_function_and_carries_the_spec_on_one_line(tmp_path):
    cmd, payload = P.task_command("pkg.mod:fn", {"a": tmp_path}, tmp_path / "r.json", label="[x] y",
                                  python_flags=("-B",))
    assert cmd[:3] == [sys.executable, "-B", "-c"] and "task_main" in cmd[3]
    assert cmd[4:] == ["pkg.mod:fn", "--result", str(tmp_path / "r.json"), "--label", "[x] y"]
    assert payload.endswith(b"\n") and payload.count(b"\n") == 1 and str(tmp_path).encode() in payload
    teardown, _ = P.task_command("pkg.mod:fn", {}, "r.json", label="x", teardown=True)
    assert teardown[-1] == "--teardown"


def test_a_task_result_is_read_back_or_named_unreadable(tmp_path):
    path = tmp_path / "r.json"
    assert P.read_task_result(path) == {}  # the child wrote none
    path.write_text('{"status": "ok", "x": 1}')
    assert P.read_task_result(path) == {"status": "ok", "x": 1}
    for planted in ("[1, 2]", "{cut"):
        path.write_text(planted)
        result = P.read_task_result(path)
        assert result["status"] == "failed" and result["error"].startswith(f"unreadable result file {path}")
    path.unlink()
    os.mkfifo(path)  # a FIFO would block a plain read
    assert P.read_task_result(path)["status"] == "failed"


def test_every_task_target_in_the_library_names_a_function_that_exists():
    """A task runs in a child by its "module:function" text: a renamed module or function
    would only fail there, at run time. Every such text in hyport_lib resolves here."""
    import ast
    import importlib
    from pathlib import Path

    import hyport_lib

    targets = set()
    for path in Path(hyport_lib.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"hyport_lib(\.\w+)+:\w+", node.value):
                targets.add(node.value)
    assert len(targets) >= 4, targets  # the grid's card, the weights' tasks, the port proof, the pre-check
    for target in sorted(targets):
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function, None)), target
