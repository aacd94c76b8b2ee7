"""Inference as a library (models/generation.py, generation_config.py) on the embedded tiny model:
single, batch, timings, determinism."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.models import generation, model_cache
from hyport_lib.models.generation import load_model, run_batch, run_inference, run_single
from hyport_lib.models.generation_config import InferenceConfig, InferenceOutcome
from hyport_lib.models.loading import dtype_kwarg
from hyport_lib.models.prompts import encode_prompts, sample_image
from hyport_lib.models.tiny import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    """Point HYPORT_CACHE at a private folder for the whole module and build once."""
    root = tmp_path_factory.mktemp("tiny-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HYPORT_CACHE", str(root))
        ensure_tiny_model()
        yield root


@pytest.fixture(scope="module")
def outcome(tiny_cache) -> InferenceOutcome:
    return run_inference(InferenceConfig())


@pytest.fixture(scope="module")
def loaded(tiny_cache):
    return load_model(InferenceConfig())


def test_run_inference_returns_texts_and_timings(outcome):
    config = InferenceConfig()
    assert outcome.single_output.strip()
    assert len(outcome.batch_outputs) == len(config.batch_prompts)
    assert all(text.strip() for text in outcome.batch_outputs)
    assert outcome.new_tokens == config.max_new_tokens
    assert 0 < outcome.first_token_s <= outcome.generate_s
    assert outcome.tokens_per_s == pytest.approx(outcome.new_tokens / outcome.generate_s)
    assert outcome.load_s > 0 and outcome.batch_s > 0
    assert outcome.model_type == "llava" and outcome.num_parameters > 100_000
    assert (outcome.dtype, outcome.device, outcome.attn_implementation) == ("float32", "cpu", "eager")
    expected = hashlib.sha256("\n".join([outcome.single_output, *outcome.batch_outputs]).encode()).hexdigest()
    assert outcome.output_hash == expected
    data = json.loads(json.dumps(outcome.to_dict()))
    assert data["trust_remote_code"] is False and data["memory"]["source"] == "process-rss"


def test_left_padded_batch_matches_unpadded_single(outcome, loaded):
    model, processor = loaded
    long_question = ("How do I open a fridge? Please list every step in detail, from standing in "
                     "front of it to closing the door again so the food stays cold.")
    config = InferenceConfig(batch_prompts=[(long_question, False), ("Describe the image.", True)])
    enc = encode_prompts(processor, generation.batch_prompts(processor, config)[0])
    mask = enc["attention_mask"]
    assert mask[1, 0] == 0 and mask[1, -1] == 1, "the image row is the shorter one, padded on the left"
    # With correct left padding (mask + positions) the padded row's greedy answer is
    # the one it gets alone; right padding changes it.
    outputs = run_batch(model, processor, config)
    assert outputs[1] == outcome.single_output
    assert outputs[0] != outputs[1]
    # The default batch starts with the single prompt, as the reference does.
    assert outcome.batch_outputs[0] == outcome.single_output


def test_greedy_is_repeatable(outcome, tiny_cache):
    again = run_inference(InferenceConfig())
    assert again.output_hash == outcome.output_hash


def test_sampling_follows_seed(loaded):
    model, processor = loaded
    a, _ = run_single(model, processor, InferenceConfig(temperature=1.0, seed=1))
    b, _ = run_single(model, processor, InferenceConfig(temperature=1.0, seed=1))
    c, _ = run_single(model, processor, InferenceConfig(temperature=1.0, seed=2))
    greedy, _ = run_single(model, processor, InferenceConfig())
    assert a == b
    assert c != a and greedy != a


def test_enable_thinking_reaches_the_template(loaded):
    model, processor = loaded
    _, off = run_single(model, processor, InferenceConfig(enable_thinking=False, max_new_tokens=2))
    _, on = run_single(model, processor, InferenceConfig(enable_thinking=True, max_new_tokens=2))
    assert off["prompt_tokens"] > on["prompt_tokens"], "thinking off pre-fills an empty think block"


def test_text_only_batch_has_no_pixels(loaded):
    model, processor = loaded
    config = InferenceConfig(batch_prompts=(("How do I open a fridge?", False), ("Hello", False)),
                             max_new_tokens=4)
    outputs = run_batch(model, processor, config)
    assert len(outputs) == 2 and all(outputs)


def test_dtype_and_attention_are_honoured(tiny_cache):
    result = run_inference(InferenceConfig(dtype="bfloat16", attn_implementation="sdpa", max_new_tokens=4))
    assert (result.dtype, result.attn_implementation) == ("bfloat16", "sdpa")
    assert result.single_output.strip() and all(result.batch_outputs)


def test_load_passes_local_files_only_dtype_and_remote_code(tiny_cache, monkeypatch):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    seen = {}
    for cls in (AutoProcessor, AutoModelForImageTextToText):
        real = cls.from_pretrained

        def spy(path, _real=real, _name=cls.__name__, **kwargs):
            seen[_name] = kwargs
            return _real(path, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    model, _ = load_model(InferenceConfig(dtype="float16"))
    assert model.dtype == torch.float16
    for kwargs in seen.values():
        assert kwargs["local_files_only"] is True and kwargs["trust_remote_code"] is False
    import transformers

    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    assert seen["AutoModelForImageTextToText"][dtype_key] == torch.float16
    assert seen["AutoModelForImageTextToText"]["attn_implementation"] == "eager"


@pytest.mark.parametrize("version,name", [("4.57.0", "torch_dtype"), ("5.24.0", "dtype")])
def test_dtype_keyword_follows_transformers_version(version, name, monkeypatch):
    monkeypatch.setattr(model_cache, "package_version", lambda dist: version)
    assert dtype_kwarg() == name


def test_image_file_and_missing_image(loaded, tmp_path):
    model, processor = loaded
    path = tmp_path / "scene.png"
    sample_image((48, 48)).save(path)
    text, stats = run_single(model, processor, InferenceConfig(image=str(path), max_new_tokens=3))
    assert text.strip() and stats["new_tokens"] == 3
    with pytest.raises(FileNotFoundError, match="image="):
        run_single(model, processor, InferenceConfig(image=str(tmp_path / "nope.png")))


def test_decode_rate_excludes_the_first_token():
    assert generation.decode_rate(5, 2.0, 1.0) == pytest.approx(4.0)
    assert generation.decode_rate(1, 2.0, 1.0) is None, "one token: nothing after the first"
    assert generation.decode_rate(5, 2.0, None) is None
    assert generation.decode_rate(5, 1.0, 1.0) is None


def test_outcome_reports_decode_speed_beside_end_to_end_speed(outcome, loaded):
    expected = (outcome.new_tokens - 1) / (outcome.generate_s - outcome.first_token_s)
    assert outcome.decode_tokens_per_s == pytest.approx(expected)
    assert outcome.to_dict()["decode_tokens_per_s"] == outcome.decode_tokens_per_s
    # tokens_per_s keeps its meaning: everything, prefill included.
    assert outcome.tokens_per_s == pytest.approx(outcome.new_tokens / outcome.generate_s)
    model, processor = loaded
    _, stats = run_single(model, processor, InferenceConfig(max_new_tokens=1))
    assert stats["new_tokens"] == 1 and stats["decode_tokens_per_s"] is None
    assert stats["tokens_per_s"] > 0


def test_config_round_trips_and_rejects_unknown_keys():
    config = InferenceConfig(dtype="bfloat16", trust_remote_code=True,
                             batch_prompts=(("a", False), ("b", True)))
    data = json.loads(json.dumps(config.to_dict()))
    assert InferenceConfig.from_dict(data) == config
    with pytest.raises(ValueError, match="max_tokens"):
        InferenceConfig.from_dict({**data, "max_tokens": 3})


def test_device_strings():
    backend, index, device = generation._backend_for("auto")
    assert (index, device) == (0, backend.device(0))
    assert generation._backend_for("cpu")[1:] == (0, "cpu")
    with pytest.raises(ValueError, match="device"):
        generation._backend_for("tpu:0")
    with pytest.raises(ValueError, match="device"):
        generation._backend_for("cuda:x")


@pytest.mark.slow
def test_greedy_output_is_identical_in_a_fresh_process(outcome, tiny_cache):
    code = (
        "from hyport_lib.models.generation import run_inference\nfrom hyport_lib.models.generation_config import InferenceConfig\n"
        "print(run_inference(InferenceConfig()).output_hash)\n"
    )
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "HYPORT_CACHE": str(tiny_cache),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == outcome.output_hash


def test_the_timed_run_is_not_the_first_call(monkeypatch):
    """The first generate of a process measures start-up (device context, kernels, on an
    NPU operator compilation): it is a warm-up, reported apart as cold_s."""
    from hyport_lib.models import generation

    calls = []
    real = generation.run_single

    def recording(model, processor, config):
        calls.append("call")
        return real(model, processor, config)

    monkeypatch.setattr(generation, "run_single", recording)
    outcome = generation.run_inference(InferenceConfig(max_new_tokens=2))
    assert calls == ["call", "call"]  # warm-up, then the timed one
    assert outcome.cold_s is not None and outcome.cold_s > 0 and outcome.warmup_runs == 1
    calls.clear()
    outcome = generation.run_inference(InferenceConfig(max_new_tokens=2, warmup_runs=0))
    assert calls == ["call"] and outcome.cold_s is None
