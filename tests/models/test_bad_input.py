"""Bad input to the commands, as a user gives it: ``hyport verify`` refuses what cannot
apply and says when it is not the model it seems (flags without their checkpoint: exit
2; a base that is another model: an error; a reload that fell back from
``architectures`` to ``model_type``: a WARN); ``hyport train`` judges a 100 MB record
within a fixed memory budget; a cache that cannot be written is named before any worker
starts (a model_path that cannot serve: test_preflight.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.models.tiny import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]


def _verify(*args: str):
    return subprocess.run([sys.executable, "-m", "hyport_lib", "verify", *args, "--no-record"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("flag, said", [
    ("--logits-parity", "hyport verify: logits_parity=True compares the logits with a checkpoint's, and there "
                        "is none: give checkpoint_path or set logits_parity=False"),
    ("--consolidate-zero", "hyport verify: consolidate_zero=True consolidates a checkpoint's ZeRO states"),
])
def test_a_checkpoint_flag_without_a_checkpoint_is_a_usage_error(flag, said):
    done = _verify(str(ensure_tiny_model()), flag)
    assert done.returncode == 2 and done.stderr.strip().startswith(said), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_base_that_is_another_model_is_an_error_and_a_class_fallback_a_warning(zoo, tmp_path):
    done = _verify(str(zoo["qwen3"]), "--base-path", str(zoo["gemma3"]))
    assert done.returncode == 1 and "FAIL: base_mismatch" in done.stdout, done.stdout[-1500:]
    renamed = shutil.copytree(zoo["qwen3"], tmp_path / "renamed")
    config = json.loads((renamed / "config.json").read_text())
    config["architectures"] = ["Qwen3ForFancyLM"]
    (renamed / "config.json").write_text(json.dumps(config))
    done = _verify(str(renamed), "--reload")
    assert done.returncode == 0 and "reload_class_fallback" in done.stdout, done.stdout[-1500:]
    assert "WARN" in done.stdout.splitlines()[-1] and "Qwen3ForFancyLM" in done.stdout


#: ``hyport ARGS`` in this process, then its own peak RSS on stderr (``PEAK_KB n``): VmHWM,
#: the high-water mark of this program's memory. (getrusage's ru_maxrss is not: Linux carries
#: the forking parent's peak across exec, so a child of a test worker that once held a
#: 2.8 GB model reports 2.8 GB, and RUSAGE_CHILDREN is the largest child ever waited for.)
#: hyport may leave through ``os._exit`` (no teardown once pyarrow is loaded): said there too.
_OWN_PEAK = ("import os, re, runpy, sys\n"
             "def peak():\n"
             "    status = open('/proc/self/status').read()\n"
             "    print('PEAK_KB', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr, flush=True)\n"
             "leave = os._exit\n"
             "os._exit = lambda code: (peak(), leave(code))\n"
             "sys.argv = ['hyport', *sys.argv[1:]]\n"
             "try:\n"
             "    runpy.run_module('hyport_lib', run_name='__main__')\n"
             "finally:\n"
             "    peak()\n")


@pytest.mark.slow
def test_a_100_mb_record_is_judged_within_a_fixed_memory_budget(tmp_path):
    """One huge record: hyport train reads no more than a bounded prefix of its text into
    the tokenizer, whatever the record's size, and answers in seconds."""
    import re
    import time

    big = "word " * 20_000_000  # 100 MB of text in one turn
    data = tmp_path / "big.json"
    data.write_text(json.dumps([{"id": "big", "conversations": [{"from": "human", "value": big},
                                                                 {"from": "gpt", "value": "ok"}]}]))
    del big
    for overflow, expected in (("drop", "no usable record left"), ("truncate", "no answer token would be left")):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", _OWN_PEAK, "train", "--dataset-path", str(data),
                               "--output-dir", str(tmp_path / overflow), "--overflow", overflow,
                               "--max-seq-len", "512", "--no-record"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - started
        peak_mb = int(re.search(r"PEAK_KB (\d+)", done.stderr).group(1)) / 1024
        print(f"overflow={overflow}: exit {done.returncode} in {seconds:.1f} s, peak RSS {peak_mb:.0f} MB")
        assert done.returncode == 2 and expected in done.stderr, done.stderr[-1500:]
        assert peak_mb < 1500 and seconds < 120


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_save_is_said_with_the_free_space(tmp_path):
    """On a 3 MB tmpfs the first checkpoint (about 3 MB) does not fit."""
    import os

    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and mount)")
    try:
        done = subprocess.run([sys.executable, "-m", "hyport_lib", "train", "--output-dir", str(mount / "out"),
                               "--max-steps", "2", "--save-steps", "1", "--num-cards", "1", "--no-record", "--json"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stderr[-2000:]
        reason = json.loads(done.stdout)["reason"]
        assert reason.startswith(f"no space left on tmpfs ({mount})") and "0 B free" in reason, reason
        assert re.search(r"the checkpoint needs about [23]\.\d MiB", reason), reason  # about 3 MB
        again = subprocess.run([sys.executable, "-m", "hyport_lib", "train", "--output-dir", str(mount / "more"),
                                "--no-record"], cwd=REPO, capture_output=True, text=True, timeout=600)
        # the plan writes nothing, so the full disk is met when the run fills the folder
        assert again.returncode == 2
        assert again.stderr.strip().splitlines()[-1].startswith("hyport train: No space left on device")
        assert "Traceback" not in again.stderr
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_a_stopped_train_records_the_steps_that_finished(tmp_path):
    import os
    import signal
    import time

    results = tmp_path / "results"
    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-m", "hyport_lib", "train", "--output-dir", str(out),
                              "--max-steps", "40", "--num-cards", "1"], cwd=REPO, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "HYPORT_RESULTS_DIR": str(results)})
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 2):
        time.sleep(0.3)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err[-2000:]
    record = json.loads((results / "04_train.json").read_text())
    assert record["verdict"] == "INTERRUPTED" and record["data"]["status"] == "interrupted"
    steps = [m["step"] for m in record["data"]["metrics"]]
    assert steps and steps == list(range(1, len(steps) + 1))
    assert record["data"]["reason"].startswith(f"stopped by a signal after step {steps[-1]}")


def test_a_readonly_cache_is_named(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("HYPORT_CACHE", str(blocker))
    assert main(["infer", "--no-record", "--num-cards", "1"]) == 2
    err = capsys.readouterr().err
    assert "HYPORT_CACHE" in err and "not writable" in err and "Traceback" not in err
