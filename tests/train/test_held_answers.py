"""Answers to held prompts before and after training (hyport_lib/train/held_answers.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hyport_lib.models.tiny import RANDOM_WEIGHTS, build_tokenizer, ensure_tiny_model
from hyport_lib.train.held_answers import answer, held_prompts
from hyport_lib.train.samples import IGNORE_INDEX, Sample


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
