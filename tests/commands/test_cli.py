"""One path for every command's usage errors (exit 2, one line), internal errors (exit 3)
and stop signals (exit 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hyport_lib.commands import _cli, build_parser, main


def test_every_command_is_discovered():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"env", "attention", "infer", "report", "scan"} <= set(commands)


@pytest.mark.parametrize("argv, words", [
    (["scan", "/no/such/folder"], "/no/such/folder"),
    (["env", "--num-cards", "0", "--no-record"], "num_cards=0: expected an integer >= 1"),
    (["infer", "--device", "tpu"], "device='tpu'"),
    (["report", "--profile", "no-such-profile"], "no-such-profile"),
    (["report", "-p", "not a key"], "key=value"),
    (["attention", "--device", "npu", "--model-path", "none"], "npu"),
])
def test_usage_errors_are_one_line_and_exit_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv("HYPORT_DEBUG", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hyport {argv[0]}: ") and words in err, err
    assert "\n" not in err and "Traceback" not in err


def test_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("HYPORT_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(["scan", "/no/such/folder"])


def test_an_internal_error_exits_3_with_its_traceback_and_no_secret(capsys, monkeypatch):
    monkeypatch.delenv("HYPORT_DEBUG", raising=False)
    monkeypatch.setenv("DEMO_TOKEN", "tok-4242-secret")

    def run(args):
        return {}["tok-4242-secret"]  # a defect (KeyError) whose message holds a secret

    assert _cli.invoke("demo", run, None) == _cli.INTERNAL_EXIT == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err
    assert err.strip().splitlines()[-1].startswith("hyport demo: internal error (KeyError")
    assert "tok-4242-secret" not in err
    monkeypatch.setenv("HYPORT_DEBUG", "1")
    with pytest.raises(KeyError):
        _cli.invoke("demo", run, None)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_stop_signals_end_a_command_with_130_after_its_cleanup(signum, capsys):
    cleaned = []

    def run(args):
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)
            return 0
        finally:
            cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    assert _cli.invoke("demo", run, None) == 130
    assert cleaned == [True]
    assert signal.Signals(signum).name in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_signal_does_not_abort_a_shielded_write():
    written = []

    def run(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            with _cli.shielded():
                os.kill(os.getpid(), signal.SIGTERM)  # arrives during the write
                time.sleep(0.2)
                written.append("partial result")
        return 0

    assert _cli.invoke("demo", run, None) == 130
    assert written == ["partial result"]


def test_a_signal_held_back_by_the_shield_is_raised_after_it():
    with pytest.raises(_cli.Stopped):
        with _cli.stop_signals_raise():
            with _cli.shielded():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
            time.sleep(5)  # never reached: raised as the block ends


@pytest.mark.slow
def test_sigterm_to_a_real_command_process_exits_130(tmp_path):
    env = {**os.environ, "HYPORT_RESULTS_DIR": str(tmp_path)}
    code = ("import time, hyport_lib.commands as c\n"
            "from hyport_lib.commands import _cli\n"
            "def run(a):\n    print('ready', flush=True); time.sleep(60)\n"
            "raise SystemExit(_cli.invoke('demo', run, None))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "stopped by SIGTERM" in err


def _piped_command(run_body: str) -> subprocess.Popen:
    code = ("from hyport_lib.commands import _cli\n"
            f"def run(a):\n{run_body}\n"
            "raise SystemExit(_cli.invoke('demo', run, None))\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``hyport triage ... | head``: the closed pipe is no internal error (review D7)."""
    proc = _piped_command("    for i in range(200000):\n        print('line', i)\n")
    assert proc.stdout.readline().strip() == "line 0"
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == _cli.PIPE_CLOSED_EXIT == 141
    assert "internal error" not in err and "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.slow
def test_a_broken_pipe_of_the_commands_own_is_still_a_defect():
    """Only the output's reader going away is quiet: a pipe to a child is hyport's bug."""
    proc = _piped_command("    print('ready', flush=True)\n    raise BrokenPipeError(32, 'Broken pipe')\n")
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "ready" and proc.returncode == _cli.INTERNAL_EXIT
    assert "internal error (BrokenPipeError" in err
