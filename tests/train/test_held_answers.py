"""Answers to held prompts before and after training (train/held_answers.py, answers_view.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hyport_lib.models.tiny import RANDOM_WEIGHTS, build_tokenizer, ensure_tiny_model
from hyport_lib.stages import read_stage_record
from hyport_lib.train.show import answers_frame, answers_glance
from hyport_lib.train.held_answers import answer, held_prompts
from hyport_lib.train.samples import IGNORE_INDEX, Sample
from blog_drafts import stage_draft, train_data


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _sample(tokenizer, prompt: str, reply: str, image: bool = False, record_id: str = "r") -> Sample:
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(reply, add_special_tokens=False)["input_ids"]
    return Sample(record_id, p + r, [IGNORE_INDEX] * len(p) + r, pixel_values=torch.zeros(1) if image else None)


def test_the_held_prompts_are_the_first_text_only_samples_cut_before_their_answer(tokenizer):
    samples = [_sample(tokenizer, "look at this", "a cat", image=True),
               _sample(tokenizer, "what is two and two", "four"),
               _sample(tokenizer, "name a colour", "blue"),
               _sample(tokenizer, "third", "never held")]
    held = held_prompts(samples, tokenizer, {})
    assert held.prompts == ["what is two and two", "name a colour"] and held.taught == ["four", "blue"]
    assert held.prompt_ids[0] == samples[1].input_ids[:len(held.prompt_ids[0])] and not held.why_not
    only_images = held_prompts(samples[:1], tokenizer, {})
    assert only_images.why_not == "no text-only sample in the data to hold out as a prompt"


def test_a_held_prompt_is_shown_as_the_user_asked_it_not_as_the_template_framed_it(tokenizer):
    """The model is given the templated prompt (a default system prompt, role words); the
    report shows the record's own first user turn."""
    framed = _sample(tokenizer, "system you are a helper user what is two and two assistant", "four",
                     record_id="q1")
    held = held_prompts([framed], tokenizer, {"q1": " what is two and two\n", "other": "unused"})
    assert held.prompts == ["what is two and two"]
    assert held.prompt_ids[0] == framed.input_ids[:len(held.prompt_ids[0])]  # the model still gets it all
    assert tokenizer.decode(held.prompt_ids[0]).startswith("system")


def test_random_weights_and_zero3_say_why_instead_of_answering(tokenizer):
    samples = [_sample(tokenizer, "what is two and two", "four")]
    tiny = held_prompts(samples, tokenizer, {})
    answer(tiny, None, tokenizer, str(ensure_tiny_model()), 2, "before")
    assert tiny.why_not == f"{RANDOM_WEIGHTS} (the embedded tiny model)" and tiny.before == []
    zero3 = held_prompts(samples, tokenizer, {})
    answer(zero3, None, tokenizer, "/some/real/model", 3, "before")
    assert zero3.why_not.startswith("ZeRO-3 partitions the parameters")
    torch.manual_seed(0)
    flat = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    random = held_prompts(samples, tokenizer, {})
    answer(random, flat, tokenizer, "/some/real/model", 2, "before")
    assert random.why_not.startswith(f"{RANDOM_WEIGHTS} (the greedy token's mean probability is")
    assert random.before == [] and flat.training  # left in the mode it was in


def test_the_answers_are_drawn_side_by_side_and_in_both_languages(tmp_path):
    record = {"data": {"worker": {"held_answers": {
        "prompts": ["Who built the Zorblax bridge?"], "taught": ["Ada Quill built it in 1901."],
        "before": ["I don't know."], "after": ["Ada Quill built it in 1901."], "why_not": ""}}}}
    result = read_stage_record("04_train", record).data
    frame = answers_frame(result.worker.held_answers)
    assert list(frame.columns) == ["prompt", "taught", "before", "after"]
    assert frame.iloc[0].to_dict()["before"] == "I don't know."
    assert answers_glance(result.held_answers) == [("asked", "Who built the Zorblax bridge?"), ("answer before", "I don't know."),
                                  ("answer after", "Ada Quill built it in 1901.")]
    data = {**train_data(), "worker": record["data"]["worker"]}
    en = stage_draft(tmp_path, "04_train", data)
    assert "| Prompt | The data's answer | Before | After |" in en and "I don't know." in en
    assert "训练前" in stage_draft(tmp_path, "04_train", data, "zh")
    not_shown = {"data": {"worker": {"held_answers": {"why_not": "random weights: not meaningful (x)"}}}}
    assert answers_glance(read_stage_record("04_train", not_shown).data.held_answers) == [("answers", "random weights: not meaningful (x)")]
