"""One path for every command's usage errors (exit 2, one line), internal errors (exit 3)
and stop signals (exit 130); bad values and an unwritable results folder refused before the run."""

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


#: Cases that reach the stages' pre-run plans, which run in a child process.
SLOW_PRECHECK = pytest.mark.slow


@pytest.mark.parametrize("argv, words", [
    (["infer", "--infer-timeout-s", "nan", "--no-record"], "infer_timeout_s='nan': expected a finite number"),
    (["report", "--only", ","], "--only ','"),
    (["report", "-p", "num_cards=abc"], "num_cards='abc': expected an integer >= 1"),
    (["report", "-p", "device=tpu"], "device='tpu': expected one of"),
    (["report", "-p", "infer_timeout_s=nan"], "infer_timeout_s"),
    (["report", "-p", "max_steps=-3"], "max_steps=-3"),
    (["report", "--only", "05", "-p", "checksum=md5"], "checksum='md5': expected one of 'xxh3', 'crc32', 'sha256'"),
    (["report", "--only", "05", "-p", "reload_timeout_s=-5"], "reload_timeout_s=-5: expected a number > 0"),
    pytest.param(["report", "--only", "05", "-p", "weights_path=/nonexistent/x", "-p", "logits_parity=false"], "weights_path='/nonexistent/x': no such", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "05", "-p", "base_path=/nope"], "base_path='/nope': no such file or folder", marks=SLOW_PRECHECK),
    (["verify", "/nonexistent", "--reload-timeout-s", "nan"], "reload_timeout_s='nan': expected a finite number"),
    (["report", "--only", "04", "-p", "lora_rank=0"], "lora_rank=0: expected an integer >= 1"),
    (["report", "--only", "04", "-p", "overflow=cut"], "overflow='cut': expected one of"),
    (["report", "--only", "04", "-p", "lr_scheduler_type=foo"], "lr_scheduler_type='foo'"),
    pytest.param(["report", "--only", "04", "-p", "run_name=a/b"], "run_name='a/b'", marks=SLOW_PRECHECK),
    (["report", "--only", "04", "-p", "warmup_steps=-1"], "warmup_steps=-1: expected an integer >= 0"),
    (["report", "--only", "04", "-p", "loss_scale=-1"], "loss_scale=-1: expected a number >= 0"),
    (["report", "--only", "04", "-p", "master_port=70000"], "master_port=70000: expected an integer"),
    pytest.param(["report", "--only", "04", "-p", "packing=false", "-p", "attn_implementation=foo"],
         "attn_implementation='foo': not an attention transformers", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "02", "-p", "dtypes=[float99]"], "02_attention: dtypes=['float99']", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "02", "-p", "code_path=/nope"], "code_path='/nope': no such", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "04", "-p", "dataset_path=/nope.json"], "dataset_path='/nope.json': no such file", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "04", "-p", "deepspeed_config=/nope/ds.json"], "deepspeed_config='/nope/ds.json'", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "01", "--kernel", "nosuch"], "--kernel 'nosuch': no such Jupyter kernel", marks=SLOW_PRECHECK),
    (["train", "--max-steps", "1", "--master-port", "70000", "--no-record"], "master_port=70000"),
    (["train", "--max-steps", "1", "--packing", "false", "--attn-implementation", "foo", "--no-record"],
     "attn_implementation='foo'"),
])
def test_bad_values_are_refused_before_the_run(argv, words, capsys, tmp_path):
    if argv[0] == "report":
        argv = argv + ["--output-dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


#: What every front end says of flash_attention_2 on this CPU host (npu_attention/runnable.py).
NOT_ON_CPU = ("attn_implementation='flash_attention_2': cpu cannot run it (flash-attn is not installed; "
              "transformers runs it on CUDA or an Ascend NPU only); use attn_implementation=auto (here: "
              "eager), or one of eager, sdpa, hyport_torch, hyport_npu_emulated")
#: Stage 05's reload only loads the model: on a CPU it takes flex_attention too.
ONLY_LOADS = ("verify", "05_weights")


def _not_on_cpu(stage: str) -> str:
    return NOT_ON_CPU + (", flex_attention" if stage in ONLY_LOADS else "")


@pytest.mark.parametrize("argv", [["infer", "--device", "cpu", "--num-cards", "1"],
                                  ["train", "--device", "cpu", "--packing", "false", "--max-steps", "1"],
                                  ["verify"]], ids=lambda argv: argv[0])
def test_an_attention_the_device_cannot_run_is_refused_by_the_plan_in_one_line(argv, capsys, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv("HYPORT_DEBUG", raising=False)
    assert main([*argv, "--attn-implementation", "flash_attention_2", "--no-record"]) == 2
    # after the plan's progress (04 reads its dataset first), the one line
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"hyport {argv[0]}: {_not_on_cpu(argv[0])}"


@pytest.mark.parametrize("stage_id", ["03_inference", "04_train", "05_weights"])
def test_the_reports_plans_refuse_it_with_the_same_line(stage_id):
    """make_plans, which the report runs in its pre-run child, here in process."""
    from hyport_lib.report.run_parameters import make_plans, plan_requests, resolve_parameters
    from hyport_lib.stages import discover_stages

    stages = discover_stages()
    selected = [s for s in stages if s.id == stage_id]
    assert selected
    params = resolve_parameters({}, {"attn_implementation": "flash_attention_2", "device": "cpu",
                                     "packing": False, "num_cards": 1}, stages)
    assert make_plans(plan_requests(params, selected)).refused == [f"{stage_id}: {_not_on_cpu(stage_id)}"]


@pytest.mark.parametrize("argv", [["env"], ["infer", "--num-cards", "1"], ["attention", "--model-path", "none"],
                                  ["train", "--max-steps", "1"], ["verify", "."]], ids=lambda argv: argv[0])
def test_an_unwritable_results_folder_is_named_before_any_work(argv, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "results-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(blocker / "sub"))
    monkeypatch.chdir(tmp_path)  # verify's PATH "." is this folder
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "results folder" in err and "HYPORT_RESULTS_DIR" in err and "Traceback" not in err

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


def test_a_cleanup_that_fails_while_a_stop_unwinds_is_the_stop_not_a_defect(capsys):
    """libcst's codegen raised KeyError from a ``finally`` a SIGTERM cut short: exit 3 and a
    traceback where the user had stopped the port (seen in CI)."""
    import signal as signals

    from hyport_lib.commands._cli import invoke
    from hyport_lib.utils.signals import Stopped

    def run(args):
        try:
            raise Stopped(signals.SIGTERM)
        finally:
            raise KeyError("IndentedBlock()")

    assert invoke("port", run, None) == 130
    err = capsys.readouterr().err
    assert "stopped by SIGTERM" in err and "internal error" not in err

    def broken(args):
        raise KeyError("a real defect")

    assert invoke("port", broken, None) == 3
