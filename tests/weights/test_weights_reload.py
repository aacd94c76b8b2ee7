"""Stage 05's reload in a fresh process: LOAD_OK with the right parameter count, the
silent failures (missing keys) and the loud ones (placeholders) as findings, and no
child left behind on a timeout."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hyport_lib.models.tiny import MARKER_FILE, ensure_tiny_model
from hyport_lib.weights.reload import reload, reload_findings


@pytest.fixture(scope="module")
def tiny():
    return ensure_tiny_model(max_shard_size="500KB")


def _rewrite(folder: Path, change) -> None:
    path = sorted(folder.glob("model*.safetensors"))[-1]
    with safe_open(str(path), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.slow
def test_reload_says_load_ok_with_the_parameter_count(tiny, tmp_path):
    from hyport_lib.weights.layout import inspect_checkpoint

    result = reload(tiny, dtype="bfloat16", log_dir=tmp_path)
    marker = json.loads((tiny / MARKER_FILE).read_text())
    assert result.load_ok, (result.reason, result.log_tail)
    assert result.line == f"LOAD_OK llava {marker['num_parameters']}"
    assert result.parameters == inspect_checkpoint(tiny).parameters == marker["num_parameters"]
    assert result.loaded_dtype == "torch.bfloat16" and result.attn_implementation == "eager"
    assert result.processor == "LlavaProcessor" and result.processor_error is None
    assert not (result.missing_keys or result.unexpected_keys or result.mismatched_keys)
    assert result.trust_remote_code is False and result.local_files_only is True
    assert result.peak_rss_bytes > 50 * 2**20 and result.load_s > 0
    assert "LOAD_OK llava" in Path(result.log_path).read_text()
    assert reload_findings(result) == []


@pytest.mark.slow
def test_missing_keys_load_silently_and_are_findings(tiny, tmp_path):
    """transformers loads a folder that lacks a weight and initialises it at random."""
    folder = tmp_path / "holes"
    shutil.copytree(tiny, folder)
    gone = "language_model.model.layers.1.mlp.up_proj.weight"
    index = json.loads((folder / "model.safetensors.index.json").read_text())

    def change(t):
        t.pop(gone, None)
        t["bogus.weight"] = torch.ones(2)

    _rewrite(folder, change)
    del index["weight_map"][gone]
    index["weight_map"]["bogus.weight"] = sorted(p.name for p in folder.glob("model-*"))[-1]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    result = reload(folder, dtype="float32", log_dir=tmp_path)
    assert result.load_ok
    assert result.missing_keys == ["model.language_model.layers.1.mlp.up_proj.weight"]
    assert result.unexpected_keys == ["bogus.weight"]
    found = {f.cls: f for f in reload_findings(result)}
    assert set(found) == {"reload_missing_keys", "reload_unexpected_keys"}
    assert found["reload_missing_keys"].severity == "error" and found["reload_missing_keys"].file == "holes"


@pytest.mark.slow
def test_placeholder_fails_the_reload_with_one_line(tiny, tmp_path):
    folder = tmp_path / "zero3"
    shutil.copytree(tiny, folder)
    _rewrite(folder, lambda t: t.update({k: torch.empty(0, dtype=v.dtype) for k, v in t.items()}))
    result = reload(folder, log_dir=tmp_path)
    assert result.status == "failed" and not result.load_ok
    assert result.reason.startswith("RuntimeError:") and "\n" not in result.reason
    assert "Traceback" not in result.reason
    assert "MISMATCH" in result.log_tail or "mismatch" in result.log_tail.lower()
    (f,) = reload_findings(result)
    assert f.cls == "reload_failed" and f.file == "zero3" and result.line.startswith("FAILED:")


def test_a_missing_reload_path_names_itself(tmp_path):
    with pytest.raises(FileNotFoundError, match="reload path"):
        reload(tmp_path / "nowhere")


def _workers(logs: Path) -> list[int]:
    """Pids of the weight workers writing into ``logs`` (their command line names both)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "hyport_lib.weights." in cmdline and str(logs) in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_timeout_kills_the_child_and_says_so(tiny, tmp_path):
    logs = tmp_path / "logs-timeout"
    result = reload(tiny, timeout_s=0.5, log_dir=logs)
    assert result.status == "timeout" and "0.5s" in result.reason
    assert (reload_findings(result)[0].cls) == "reload_failed"
    assert _workers(logs) == []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_sigterm_to_hyport_verify_stops_the_reload_child(tiny, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    logs = tmp_path / "logs-stop"
    proc = subprocess.Popen([sys.executable, "-m", "hyport_lib", "verify", str(tiny), "--reload",
                             "--no-record", "--log-dir", str(logs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _workers(logs) and time.monotonic() < deadline:  # the worker is up
        time.sleep(0.05)
    assert _workers(logs), "the reload worker never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert _workers(logs) == []


@pytest.mark.slow
def test_the_reload_step_is_named_while_it_runs(tiny, tmp_path):
    # Notebook 05 used to sit on its last "100%" line while the reload ran for seconds.
    from hyport_lib.weights import stage
    from hyport_lib.weights.params import Params
    from hyport_lib.weights.show import progress_line

    seen = []
    plan = stage.plan(Params(weights_path=str(tiny), full_scan=True, reload=True, logits_parity=False,
                             consolidate_zero=False))
    result = stage.run(plan, on_progress=seen.append)
    assert result.reload is not None and result.reload.load_ok
    phases = list(dict.fromkeys(p.phase for p in seen))
    assert phases[-1] == "reload: from_pretrained in a fresh process" and len(phases) >= 2, phases
    assert progress_line(seen[-1]) == "reload: from_pretrained in a fresh process …"
