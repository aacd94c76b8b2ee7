"""Answers to held prompts before and after training: what the run changed, in words (rank 0,
greedy, the first text-only samples; on random weights or under ZeRO-3 the record says why not).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import torch

from hyport_lib.models.tiny import random_weights_reason
from hyport_lib.models.generation import greedy
from hyport_lib.train.samples import IGNORE_INDEX, Sample

#: Prompts answered (the first text-only samples of the data).
HELD_PROMPTS = 2
#: New tokens per answer at most.
NEW_TOKENS = 32


@dataclass
class HeldAnswers:
    """The prompts, the answers the data teaches, and the model's before and after."""

    prompts: list[str] = field(default_factory=list)
    taught: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    why_not: str = ""  # set when the answers are not shown (random weights, ZeRO-3, no text sample)
    prompt_ids: list[list[int]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("prompt_ids")
        return data


def held_prompts(samples: Sequence[Sample], tokenizer, questions: Mapping[str, str],
                 count: int = HELD_PROMPTS) -> HeldAnswers:
    """The prompts (everything before the first answer token) of the first text-only samples;
    shown as ``questions`` (record id -> first user turn): the template's own words (a default
    system prompt, role names) are not what the user asked."""
    held = HeldAnswers()
    for sample in samples:
        if sample.pixel_values is not None or IGNORE_INDEX not in sample.labels:
            continue
        start = next((i for i, label in enumerate(sample.labels) if label != IGNORE_INDEX), None)
        if not start:
            continue
        end = next((i for i in range(start, len(sample.labels)) if sample.labels[i] == IGNORE_INDEX),
                   len(sample.labels))
        held.prompt_ids.append(sample.input_ids[:start])
        question = questions.get(sample.record_id)
        held.prompts.append(question.strip() if question is not None else
                            tokenizer.decode(sample.input_ids[:start], skip_special_tokens=True).strip())
        held.taught.append(tokenizer.decode(sample.input_ids[start:end], skip_special_tokens=True).strip())
        if len(held.prompt_ids) == count:
            break
    if not held.prompt_ids:
        held.why_not = "no text-only sample in the data to hold out as a prompt"
    return held


def answer(held: HeldAnswers, model, tokenizer, model_path: str, zero_stage: int, when: str) -> None:
    """Fill ``held.before`` or ``held.after`` (``when``) with ``model``'s greedy answers; on
    random weights or under ZeRO-3, set ``held.why_not`` instead."""
    if held.why_not:
        return
    if zero_stage == 3:
        held.why_not = "ZeRO-3 partitions the parameters across the ranks: rank 0 alone cannot generate"
        return
    reason = random_weights_reason(model_path)
    if reason:
        held.why_not = reason
        return
    was_training = model.training
    model.eval()
    answers, top1 = [], []
    device = next(model.parameters()).device
    for ids in held.prompt_ids:
        inputs = {"input_ids": torch.tensor([ids], device=device),
                  "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device=device)}
        tokens, probability = greedy(model, inputs, NEW_TOKENS)
        answers.append(tokenizer.decode(tokens, skip_special_tokens=True).strip())
        top1.append(probability)
    model.train(was_training)
    if when == "before":
        reason = random_weights_reason(model_path, sum(top1) / len(top1))
        if reason:
            held.why_not = reason
            return
    setattr(held, when, answers)
