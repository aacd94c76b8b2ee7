"""Stage 05's checks that load the folder in a fresh process (:mod:`hyport_lib.weights.reload`):
LOAD_OK with the right parameter count, the silent failures (missing keys) and the loud
ones (placeholders) as findings, no child left behind on a timeout, a child's end read
from its result or its log, and the logits parity judged by the proofs' tolerance table."""

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
from hyport_lib.proof.tolerance import SAME_WEIGHTS, TOLERANCE
from hyport_lib.weights.reload import (PROMPT, ParityResult, ReloadResult, _outcome, parity_findings, parity_in_child,
                                       reload, reload_findings)


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
def test_every_attention_offered_for_the_reload_reloads(tiny, tmp_path):
    """Each name 05's form offers on a CPU is accepted by its plan and loads in the fresh child
    (hyport's names are registered there first: the child knows only transformers' own)."""
    from hyport_lib.npu_attention.runnable import attention_choices
    from hyport_lib.weights import stage
    from hyport_lib.weights.params import Params

    offered = attention_choices("cpu", work="load")
    assert {"hyport_torch", "hyport_npu_emulated", "flex_attention"} <= set(offered)
    for name in offered:
        stage.plan(Params(weights_path=str(tiny), attn_implementation=name, logits_parity=False,
                          consolidate_zero=False))
        attention = "eager" if name == "auto" else name  # as the stage runs it
        result = reload(tiny, dtype="float32", attn_implementation=attention, log_dir=tmp_path / name)
        assert result.load_ok and result.attn_implementation == attention, (name, result.reason)


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


def test_a_childs_end_is_read_from_its_result_else_from_its_log(tmp_path):
    log, result = tmp_path / "reload.log", tmp_path / "reload.json"
    log.write_text("loading\nTraceback (most recent call last):\nValueError: bad config\n")
    out = _outcome(log, result, 1, False, 600.0, 1.23456)
    assert (out.status, out.result, out.wall_s) == ("failed", {}, 1.235)
    assert out.reason == "ended without a result (exit code 1); ValueError: bad config"
    result.write_text(json.dumps({"status": "failed", "error_type": "OSError", "error": "no file\nsecond line"}))
    assert _outcome(log, result, 1, False, 600.0, 1.0).reason == "OSError: no file"  # one line
    timed_out = _outcome(log, result, None, True, 0.5, 1.0)
    assert timed_out.status == "timeout" and timed_out.reason == "no result after 0.5s: the process group was killed"
    result.write_text(json.dumps({"status": "ok", "tokens": 3}))
    ok = _outcome(log, result, 0, False, 600.0, 1.0)
    assert (ok.status, ok.reason, ok.result["tokens"]) == ("ok", None, 3)
    assert ok.log_tail.endswith("ValueError: bad config") and ok.log_path == str(log)


def test_logits_parity_is_judged_by_the_proofs_table_and_nan_never_passes():
    bound = TOLERANCE["float32"][SAME_WEIGHTS]

    def parity(max_abs_diff, top1_agreement):
        return ParityResult("/run/final", "/run/checkpoint-2", "ok", tokens=7, max_abs_diff=max_abs_diff,
                            mean_abs_diff=0.0, top1_agreement=top1_agreement, max_kl=0.0, identical=False)

    assert parity(bound, 1.0).same_model and parity_findings(parity(bound, 1.0)) == []
    assert parity(bound, 1.0).to_dict()["same_model"] is True
    nan = float("nan")
    for figures in ((bound * 2, 1.0), (0.0, 0.9), (nan, 1.0), (nan, nan)):
        assert not parity(*figures).same_model, figures
        [found] = parity_findings(parity(*figures))
        assert (found.cls, found.file, found.severity) == ("logits_differ", "checkpoint-2", "warning")
    failed = ParityResult("/run/final", "/run/checkpoint-2", "failed", reason="neither holds tokenizer files")
    [found] = parity_findings(failed)
    assert not failed.same_model and (found.cls, found.severity) == ("compare_failed", "warning")
    assert found.message == "logits parity could not run: neither holds tokenizer files"


def test_a_recorded_parity_of_nan_logits_reads_back_as_not_the_same_model():
    """NaN logits are recorded as nulls (strict JSON): read back from a 05 record, the
    parity is not the same model, and writes again; no TypeError from comparing None."""
    from hyport_lib.utils.typed_records import from_mapping, to_mapping

    recorded = {"path": "/run/final", "other_path": "/run/checkpoint-2", "status": "ok", "tokens": 7,
                "max_abs_diff": None, "mean_abs_diff": None, "top1_agreement": None, "max_kl": None,
                "identical": False, "same_model": False}
    read = from_mapping(ParityResult, recorded)
    assert read.max_abs_diff is None and not read.same_model
    assert to_mapping(read)["same_model"] is False


def test_the_parity_child_compares_logits_and_nan_weights_are_no_figure(tmp_path):
    """In process (the child's function itself): one folder against itself is identical;
    NaN weights make the largest difference infinite (a null in the record, read as NaN)
    and the top-1 agreement unknown, never a figure that passes."""
    tiny = ensure_tiny_model()
    spec = {"path": str(tiny), "other_path": str(tiny), "tokenizer_path": str(tiny), "prompt": PROMPT}
    same = parity_in_child(spec)
    assert same["identical"] and same["max_abs_diff"] == 0.0 and same["top1_agreement"] == 1.0
    assert same["tokens"] > 5 and same["mean_abs_diff"] == 0.0 and same["max_kl"] == pytest.approx(0.0, abs=1e-6)
    broken = tmp_path / "nan"
    shutil.copytree(tiny, broken)
    _rewrite(broken, lambda t: t.update({k: torch.full_like(v, float("nan")) for k, v in t.items()
                                         if k.endswith("lm_head.weight")}))
    nan = parity_in_child({**spec, "other_path": str(broken)})
    assert not nan["identical"] and nan["max_abs_diff"] == float("inf") and nan["top1_agreement"] is None


def test_reload_findings_agree_with_their_count():
    def said(n):
        names = [f"layers.{i}.weight" for i in range(n)]
        result = ReloadResult(path="/m/final", status="LOAD_OK", dtype="bfloat16", attn_implementation="sdpa",
                              trust_remote_code=False, missing_keys=names, mismatched_keys=names, unexpected_keys=names)
        return [f.message.rsplit(": ", 1)[0] for f in reload_findings(result)]  # less the names

    assert said(1) == ["1 weight is missing: the model initialised it randomly",
                       "1 weight has another shape than the model expects", "1 weight is not used by the model"]
    assert said(2) == ["2 weights are missing: the model initialised them randomly",
                       "2 weights have another shape than the model expects", "2 weights are not used by the model"]
