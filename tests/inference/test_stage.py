"""Stage 03 as a whole (inference/stage.py): the plan checks everything before any worker
starts and writes nothing; ``hyport infer``; and which attention the grid runs, decided and
proven in the plan: ``auto`` is the fused kernel on an NPU once the swap proves itself on
the model's prefill and cached decoding, eager elsewhere; a swap that fails its proof keeps
the grid on eager, and the plan says why."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from hyport_lib.commands import main
from hyport_lib.inference import stage
from hyport_lib.inference.params import Params
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.npu_attention import hf_integration
from hyport_lib.params import ParameterError, from_arguments
from hyport_lib.proof.swap import DECODE_STEPS
from fault_injection.hyport_faults import FAULT_ENV

from .test_grid import _FakeCuda, _plan as _grid_plan

SMALL = dict(max_new_tokens=4, num_cards=1)


def _plan(tmp_path, **kw):
    return stage.plan(Params(**{**SMALL, "log_dir": str(tmp_path / "logs"), **kw}))


def test_auto_runs_eager_off_an_npu_and_proves_nothing(tmp_path):
    plan = _plan(tmp_path, device="cpu")
    assert Params().attn_implementation == "auto"
    assert plan.config.attn_implementation == "eager" and plan.attention.proof is None
    assert not any(note.startswith("attention:") for note in plan.notes)


def test_a_named_swap_proves_itself_on_prefill_and_cached_decoding(tmp_path, monkeypatch):
    tiny = str(ensure_tiny_model())
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))  # proven here, not read from a cache
    plan = _plan(tmp_path, device="cpu", model_path=tiny, attn_implementation="hyport_npu_emulated")
    proof = plan.attention.proof
    assert plan.config.attn_implementation == "hyport_npu_emulated" and proof.passed, proof.reason
    assert proof.decode_steps == DECODE_STEPS - 1 >= 2  # every cached step past the prefill
    assert proof.max_abs_decode_logits < 1e-3
    assert proof.swapped_calls > 0 and "cached decoding steps" in proof.line() and not proof.cached
    assert [n for n in plan.notes if n.startswith("attention: hyport_npu_emulated: attention proof PASS")]


@pytest.mark.slow  # the plan asks the npu-smi double which cards are busy
def test_auto_on_an_npu_runs_the_fused_kernel_once_the_emulation_proves_it(fake_npu, tmp_path):
    plan = _plan(tmp_path, device="npu")
    assert plan.config.attn_implementation == "hyport_npu_fused"
    assert plan.attention.proof.passed and plan.attention.proof.backend == "npu-emulated"
    assert "NPU attention emulated" in plan.attention.note  # a CPU proof, labelled as one


def test_a_swap_wrong_only_when_decoding_keeps_the_grid_on_eager(tmp_path, monkeypatch):
    """A swap exact on the prompt (query as long as the keys) but that forgets the KV cache
    when decoding: training's proof cannot see it; the inference proof must."""
    exact = hf_integration._attend_mask

    def forgets_the_cache(mask, batch, sq, sk, window, query):
        attend = exact(mask, batch, sq, sk, window, query)
        if sq == sk:
            return attend
        last = torch.zeros(batch, 1, sq, sk, dtype=torch.bool)
        last[..., -1] = True
        return last

    tiny = str(ensure_tiny_model())
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))  # no proof cached by another test
    monkeypatch.setattr(hf_integration, "_attend_mask", forgets_the_cache)
    plan = _plan(tmp_path, device="cpu", model_path=tiny, attn_implementation="hyport_npu_emulated")
    proof = plan.attention.proof
    assert not proof.passed and "cached decoding: logits differ from eager" in proof.reason
    assert proof.max_abs_logits is not None and proof.max_abs_logits < 1e-3  # the prompt itself was exact
    assert plan.config.attn_implementation == "eager"
    assert any(n.startswith("attention: hyport_npu_emulated not used:") and "keeps eager" in n
               for n in plan.notes)


def test_the_plan_reckons_host_ram_from_the_model(tmp_path):
    """The tiny model stores no safetensors the memory model may read: its empty model counts."""
    plan = _plan(tmp_path, device="cpu", model_path=str(ensure_tiny_model()))
    (ram,) = [n for n in plan.notes if n.startswith("memory: fits: ")]
    assert "host RAM" in ram and "(2 ranks x" not in ram  # one worker (num_cards=1)
    assert plan.memory.setting.startswith("inference, fp32, seq ") and plan.memory.card_line == ""
    assert "an empty model built from" in plan.memory.shape_source and plan.memory.parameters > 0


def test_a_tied_embedding_is_counted_once_in_the_host_ram_need(tmp_path):
    """build_empty_model ties weights as loading does: a tied lm_head is not a second matrix."""
    from transformers import LlamaConfig

    from hyport_lib.models.loading import build_empty_model

    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    config.save_pretrained(tmp_path)
    model = build_empty_model(str(tmp_path))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) < 1000 * 64 * 2


@pytest.mark.parametrize("family", ["qwen2_vl", "idefics3", "mllama"])
def test_vlm_prompts_prove_the_swap_they_used_to_fail(family, zoo, tmp_path, monkeypatch):
    """A left pad position predicts the first real token; eager and the swap may differ in
    that unread output. Its label used to count, so Qwen2-VL and Idefics3 failed their proof
    on gradients while every real logit matched; mllama's image token (an id past the text
    vocabulary) made the proof's loss raise."""
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    plan = _plan(tmp_path, device="cpu", model_path=str(zoo[family]), attn_implementation="hyport_npu_emulated",
                 skip_not_applicable=True)
    assert plan.attention.proof.passed, plan.attention.proof.reason
    assert plan.attention.proof.decode_steps == DECODE_STEPS - 1  # the image prompts decoded too
    assert plan.config.attn_implementation == "hyport_npu_emulated"


def test_the_plan_refuses_uuid_visible_devices_before_launching(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1a2b3c4d-0000-1111-2222-333344445555")
    monkeypatch.setattr(stage, "get_backend", lambda device, num_cards=None: _FakeCuda())
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES=.*UUID"):
        _grid_plan(device="cuda", model_path="never-loaded", log_dir=str(tmp_path / "logs"))
    assert not list(tmp_path.iterdir())  # nothing was started


def test_the_plan_writes_nothing_and_the_grid_takes_it_as_it_is(tmp_path):
    plan = _grid_plan(device="cpu", num_cards=1, infer_timeout_s="30", log_dir=str(tmp_path / "logs"))
    assert plan.card_plan.to_run == [0] and plan.log_dir == tmp_path / "logs"
    assert plan.config.model_path == "tiny" and plan.config.max_new_tokens == 4  # built when it runs
    assert plan.params.infer_timeout_s == 30.0
    assert not list(tmp_path.iterdir())
    afile = tmp_path / "afile"
    afile.write_text("x")
    for log_dir in (afile, afile / "sub"):
        with pytest.raises(ParameterError, match=re.escape(f"log_dir='{log_dir}': not a writable folder")):
            _grid_plan(device="cpu", num_cards=1, log_dir=str(log_dir))


def test_cli_batch_prompts_keep_order_and_image_flags():
    from hyport_lib.commands import build_parser

    args = build_parser().parse_args(["infer", "--batch-prompts", "[[a, false], [b, true], c]",
                                      "--max-new-tokens", "3"])
    params = from_arguments(Params, args)
    assert params.batch_prompts == [["a", False], ["b", True], ["c", False]]
    assert params.max_new_tokens == 3 and params.model_path == "tiny"
    assert stage.plan(params).config.batch_prompts == (("a", False), ("b", True), ("c", False))


@pytest.mark.slow
def test_cli_reports_failures_with_nonzero_exit(fault_switches, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv(FAULT_ENV, "0:exit,1:raise")
    code = main(["infer", "--device", "cpu", "--num-cards", "2", "--max-new-tokens", "2",
                 "--infer-timeout-s", "60", "--log-dir", str(tmp_path / "logs")])
    captured = capsys.readouterr()
    assert code == 1
    assert "exit code 3 without result" in captured.out and "RuntimeError" in captured.out
    assert "No card finished" in captured.out
    assert "cards" in captured.err  # the progress bar
    recorded = json.loads((tmp_path / "results" / "03_inference.json").read_text())
    assert recorded["verdict"] == "FAIL" and recorded["headline"]["cards ok"] == "0/2"
    assert recorded["provenance"]["device"] == "cpu"
    assert os.path.isfile(tmp_path / "logs" / "card0.log")


@pytest.mark.slow
def test_a_stopped_infer_keeps_and_records_the_cards_that_finished(fault_switches, tmp_path):
    """Ctrl-C after card 0 finished and while card 1 hangs: the table shows card 0 ok and
    card 1 interrupted, the result is recorded, and the command exits 130."""
    log_dir, results = tmp_path / "logs", tmp_path / "results"
    env = {**os.environ, FAULT_ENV: "1:hang", "HYPORT_RESULTS_DIR": str(results)}
    cmd = [sys.executable, "-m", "hyport_lib", "infer", "--device", "cpu", "--num-cards", "2",
           "--max-new-tokens", "2", "--infer-timeout-s", "600", "--log-dir", str(log_dir)]
    parent = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (log_dir / "card0.json").is_file() and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
        assert (log_dir / "card0.json").is_file(), parent.poll()
        time.sleep(1.0)  # the grid's next poll has seen card 0 finish
        parent.send_signal(signal.SIGINT)
        out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
    assert parent.returncode == 130, err[-2000:]
    assert "interrupted" in out and "logs: " in out, out
    saved = json.loads((results / "03_inference.json").read_text())
    statuses = {row["card"]: row["status"] for row in saved["data"]["rows"]}
    assert statuses == {0: "ok", 1: "interrupted"} and saved["verdict"] == "INTERRUPTED"


def test_a_log_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["infer", "--num-cards", "1", "--no-record", "--log-dir", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "log_dir=" in err and "not a writable folder" in err and "Traceback" not in err


def test_too_many_cpu_workers_are_refused_with_the_figure(capsys):
    assert main(["infer", "--num-cards", "4096", "--no-record"]) == 2
    err = capsys.readouterr().err
    assert "num_cards=4096: too many cpu workers" in err and "GiB needed for 4,096 cards" in err


@pytest.mark.slow  # starts no process, but ~15 s of checks: kept out of the fast tier
def test_inference_inputs_are_refused_before_any_worker_starts(tmp_path, capsys):
    """Found by the second review: each used to start every worker, load the model and fail
    per card; now one line and exit 2 before anything starts."""
    listed = tmp_path / "listed"
    shutil.copytree(ensure_tiny_model(), listed)
    (listed / "config.json").write_text("[]")
    untyped = tmp_path / "untyped"
    shutil.copytree(ensure_tiny_model(), untyped)
    config = json.loads((untyped / "config.json").read_text())
    config.pop("model_type")
    (untyped / "config.json").write_text(json.dumps(config))
    for extra, words in ((["--attn-implementation", "bogus"], "attn_implementation='bogus'"),
                         (["--image", str(tmp_path / "none.png")], "none.png"),
                         (["--model-path", str(listed)], "holds a JSON list, not an object"),
                         (["--model-path", str(untyped)], "names no model_type")):
        assert main(["infer", "--num-cards", "1", "--no-record", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err


@pytest.mark.parametrize("name, says", [
    ("hyport_npu_fused", r"cpu cannot run it \(npu_fusion_attention runs on an Ascend NPU only\)"),
    ("hyport_flash", "not an attention transformers [0-9.]+ or hyport knows"),
])
def test_a_hyport_attention_no_worker_could_run_is_refused_in_the_plan(name, says, tmp_path):
    with pytest.raises(ValueError, match=says):
        _grid_plan(device="cpu", num_cards=1, attn_implementation=name, log_dir=str(tmp_path))


@pytest.mark.slow
def test_the_grid_runs_through_hyports_attention_and_answers_as_eager(tmp_path):
    """Each worker registers the attention the plan names (it used to fail on every card with
    "Specified attn_implementation=... is not supported"); the NPU emulation's greedy tokens
    equal eager's, and the record shows the swapped kernel was called, not only named."""
    eager = stage.run(_grid_plan(device="cpu", num_cards=1, max_new_tokens=8, infer_timeout_s=240,
                            log_dir=str(tmp_path / "eager")))
    swapped = stage.run(_grid_plan(device="cpu", num_cards=2, max_new_tokens=8, infer_timeout_s=240,
                              attn_implementation="hyport_npu_emulated", log_dir=str(tmp_path / "swapped")))
    assert (swapped.frame["status"] == "ok").all(), swapped.frame[["card", "status", "error"]]
    assert set(swapped.frame["output_hash"]) == set(eager.frame["output_hash"])
    for card in range(2):
        outcome = json.loads((swapped.log_dir / f"card{card}.json").read_text())["outcome"]
        assert outcome["attn_implementation"] == "hyport_npu_emulated"
        assert outcome["attention_calls"] > 0
    outcome = json.loads((eager.log_dir / "card0.json").read_text())["outcome"]
    assert outcome["attn_implementation"] == "eager" and outcome["attention_calls"] is None
