"""Behaviour, not only numerics: greedy answers and perplexity, eager vs the swap.

On pretrained weights the logits are peaked, so "the same greedy tokens for 32 steps"
and "the same perplexity of a fixed text" say that the swapped model *behaves* as the
original. On random weights (the embedded tiny model) the logits are nearly flat: a
greedy token flips on a rounding difference and a perplexity is the vocabulary size, so
the comparison would mean nothing and is not made; the record says why.

Two pairs are compared, each one model loaded once and run with eager attention, then
switched to the swap, in its own dtype (so that a difference is the swap's, not the dtype's):

* the swap as the model check runs it (float32 on a CPU: hyport's emulation of
  ``npu_fusion_attention``);
* the NPU emulation in bfloat16, the dtype an NPU run uses (on a CPU an emulated figure,
  labelled so; a bf16 difference late in an answer is what bf16 accumulation does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from hyport_lib.models.tiny import random_weights_reason
from hyport_lib.models.generation import greedy
from hyport_lib.models.prompts import Prompt, encode_prompts, needs_image, sample_image

#: Prompts whose answers a pretrained chat model gives with confidence.
PROMPTS = ("What is the capital of France?", "Write one sentence about the sea.",
           "Name three primary colours.")
#: New tokens per answer (the issue's floor: fewer would hide a late divergence).
NEW_TOKENS = 32
#: A fixed text whose perplexity each model gives.
PERPLEXITY_TEXT = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was "
                   "built for the 1889 World's Fair and is one of the most visited monuments "
                   "in the world.")


@dataclass
class PairResult:
    """One swapped model against eager in the same dtype."""

    label: str
    dtype: str
    identical: bool
    first_difference: Optional[dict] = None  # prompt, token index, eager's and the swap's token
    perplexity: Optional[float] = None
    eager_perplexity: Optional[float] = None
    answers: list[str] = field(default_factory=list)


@dataclass
class Behaviour:
    """Greedy answers and perplexity, eager vs the swap (see the module docstring)."""

    meaningful: bool
    why: str = ""
    prompts: list[str] = field(default_factory=list)
    new_tokens: int = 0
    eager_answers: list[str] = field(default_factory=list)
    top1_probability: Optional[float] = None
    pairs: list[PairResult] = field(default_factory=list)

    def line(self) -> str:
        """One line for the stage summary."""
        if not self.meaningful:
            return f"behaviour: {self.why}"
        said = []
        for pair in self.pairs:
            if pair.identical:
                said.append(f"{pair.label}: {self.new_tokens}-token answers identical")
            else:
                diff = pair.first_difference or {}
                said.append(f"{pair.label}: first difference at token {diff.get('token')} of "
                            f"prompt {diff.get('prompt')}")
        return "behaviour: " + "; ".join(said)


@dataclass
class Reference:
    """Eager's greedy answers (token ids) and perplexity in one dtype: what the swap in that
    dtype is compared with."""

    answers: list[list[int]]
    perplexity: float


def eager_behaviour(model_path: str, eager, loaded) -> tuple[Behaviour, Optional[Reference]]:
    """Eager's half of the comparison, and its reference for the swap's half (None when
    the weights make the comparison meaningless: the behaviour then says why)."""
    reason = random_weights_reason(model_path)
    if reason:
        return Behaviour(False, reason), None
    reference, mean_top1 = eager_reference(eager, loaded)
    reason = random_weights_reason(model_path, mean_top1)
    if reason:
        return Behaviour(False, reason, prompts=list(PROMPTS), top1_probability=mean_top1), None
    decode = loaded.tokenizer.decode
    return Behaviour(True, prompts=list(PROMPTS), new_tokens=NEW_TOKENS, top1_probability=mean_top1,
                     eager_answers=[decode(a, skip_special_tokens=True) for a in reference.answers]), reference


def eager_reference(eager, loaded) -> tuple[Reference, float]:
    """Eager's :class:`Reference`, and the mean probability of the tokens it chose."""
    answers, top1 = zip(*(greedy(eager, _encode(loaded, text, eager.device), NEW_TOKENS) for text in PROMPTS))
    return Reference(list(answers), perplexity(eager, loaded)), sum(top1) / len(top1)


def swapped_pair(label: str, dtype: str, swapped, loaded, reference: Reference) -> PairResult:
    """The swap's answers and perplexity against eager's ``reference`` in the same ``dtype``."""
    answers = [greedy(swapped, _encode(loaded, text, swapped.device), NEW_TOKENS)[0] for text in PROMPTS]
    token = loaded.tokenizer.decode
    pair = PairResult(label, dtype, identical=all(a == b for a, b in zip(reference.answers, answers)),
                      answers=[token(a, skip_special_tokens=True) for a in answers],
                      perplexity=perplexity(swapped, loaded), eager_perplexity=reference.perplexity)
    for index, (ours, theirs) in enumerate(zip(reference.answers, answers)):
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                  None if len(ours) == len(theirs) else min(len(ours), len(theirs)))
        if at is not None:
            pair.first_difference = {
                "prompt": index, "token": at,
                "eager": token(ours[at:at + 1]) if at < len(ours) else "(end)",
                "swapped": token(theirs[at:at + 1]) if at < len(theirs) else "(end)",
                "agreed_before": token(ours[:at], skip_special_tokens=True)}
            break
    return pair


def _encode(loaded, text: str, device) -> dict:
    prompt = Prompt(text, [sample_image()]) if needs_image(loaded) else Prompt(text)
    inputs = encode_prompts(loaded, [prompt])
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}


@torch.no_grad()
def perplexity(model, loaded, text: str = PERPLEXITY_TEXT) -> float:
    """exp(mean next-token cross-entropy) of ``text`` (no chat template: plain text)."""
    ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"].to(model.device)
    logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
    return float(math.exp(float(loss)))
