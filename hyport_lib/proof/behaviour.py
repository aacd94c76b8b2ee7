"""Stage 02's behaviour check: greedy answers and the perplexity of a fixed text on the whole
model, eager against the swap (docs/attention_swap.md, "Stage 02 sees what training sees").

Pretrained logits are peaked, so the same greedy answers and the same perplexity say that the
swapped model *behaves* as the original. The model is loaded once and switched in place,
never a second copy beside the first (its memory is planned in model_check_memory.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from hyport_lib.models.generation import greedy, load_model
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.prompts import Prompt, encode_prompts, needs_image, sample_image
from hyport_lib.models.tiny import random_weights_reason

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
    """One swapped model against eager in the same dtype; ``not_compared`` says why not
    (the swap was never called: the answers would be eager's own)."""

    label: str
    dtype: str
    identical: bool
    first_difference: Optional[dict] = None  # prompt, token index, eager's and the swap's token
    perplexity: Optional[float] = None
    eager_perplexity: Optional[float] = None
    answers: list[str] = field(default_factory=list)
    swapped_calls: Optional[int] = None  # calls the swap served for these answers (None: not counted)
    not_compared: str = ""


@dataclass
class Behaviour:
    """Greedy answers and perplexity, eager vs the swap (on random weights only ``why`` not)."""

    meaningful: bool
    why: str = ""
    prompts: list[str] = field(default_factory=list)
    new_tokens: int = 0
    eager_answers: list[str] = field(default_factory=list)
    top1_probability: Optional[float] = None
    pairs: list[PairResult] = field(default_factory=list)
    #: the attention implementations the whole model ran, in order (switched in place); a
    #: swap only where its calls were counted, with their number
    ran: list[str] = field(default_factory=list)

    def line(self) -> str:
        if not self.meaningful:
            return f"behaviour: {self.why}"
        said = []
        for pair in self.pairs:
            if pair.not_compared:
                said.append(f"{pair.label}: {pair.not_compared}")
            elif pair.identical:
                said.append(f"{pair.label}: {self.new_tokens}-token answers identical")
            else:
                diff = pair.first_difference or {}
                said.append(f"{pair.label}: first difference at token {diff.get('token')} of "
                            f"prompt {diff.get('prompt')}")
        return "behaviour: " + "; ".join(said)


@dataclass
class Reference:
    """Eager's greedy answers (token ids) and perplexity: the swap's in one dtype against it."""

    answers: list[list[int]]
    perplexity: float


def on_device(inputs: dict, device) -> dict:
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}


def swap_calls(apis: list) -> int:
    """The calls the swap served so far: the registered implementation's and the flash_attn shim's."""
    return sum(api.calls.total() for api in apis)


def whole_model_behaviour(result, apis: list) -> Behaviour:
    """``result``'s model (a :class:`~.model_check.ModelComparison`) loaded once, in its dtype:
    eager, then switched to the swap; where
    that dtype is not bfloat16, then cast to it in place (what an NPU runs), eager, then the
    swap again. Each pair runs one model, so a difference is the swap's; a swap is said to
    have run only where its calls were counted (the switch alone proves nothing: the model's
    code may bypass it)."""
    name = result.attn_implementation
    model, loaded = load_model(InferenceConfig(model_path=result.model_path, device=result.device,
                                               dtype=result.dtype, trust_remote_code=result.trust_remote_code,
                                               attn_implementation="eager"))
    reference, mean_top1 = _eager_reference(model, loaded)
    reason = random_weights_reason(result.model_path, mean_top1)
    if reason:
        return Behaviour(False, reason, prompts=list(PROMPTS), top1_probability=mean_top1)
    decode = loaded.tokenizer.decode
    behaviour = Behaviour(True, prompts=list(PROMPTS), new_tokens=NEW_TOKENS, top1_probability=mean_top1,
                          eager_answers=[decode(a, skip_special_tokens=True) for a in reference.answers])
    behaviour.ran = ["eager"]
    _switched(model, name)
    _add_pair(behaviour, _swapped_pair(f"{name}, {result.dtype}", result.dtype, model, loaded, reference, apis),
              name)
    if result.dtype != "bfloat16":
        _switched(model, "eager")
        model.to(torch.bfloat16)  # in place, tensor by tensor: never a second model beside the first
        half_reference, _ = _eager_reference(model, loaded)
        behaviour.ran.append("eager, bfloat16")
        _switched(model, name)
        label = f"{'npu_fusion_attention' if result.backend == 'npu' else 'NPU emulation'}, bfloat16"
        _add_pair(behaviour, _swapped_pair(label, "bfloat16", model, loaded, half_reference, apis),
                  f"{name}, bfloat16")
    return behaviour


def _add_pair(behaviour: Behaviour, pair: PairResult, ran: str) -> None:
    behaviour.pairs.append(pair)
    if pair.swapped_calls:
        behaviour.ran.append(f"{ran}: {pair.swapped_calls:,} swapped calls")


def _switched(model, name: str) -> None:
    """``model`` switched in place to attention ``name`` (transformers' own switch); raises
    where it cannot be, rather than loading a second model."""
    model.set_attn_implementation(name)
    active = str(getattr(model.config, "_attn_implementation", "") or "")
    if active != name:
        raise RuntimeError(f"the model cannot be switched to {name!r} in place (it runs {active!r})")


def _eager_reference(eager, loaded) -> tuple[Reference, float]:
    """Eager's reference, and the mean probability of the tokens it chose."""
    answers, top1 = zip(*(greedy(eager, _encode(loaded, text, eager.device), NEW_TOKENS) for text in PROMPTS))
    return Reference(list(answers), _perplexity(eager, loaded)), sum(top1) / len(top1)


def _swapped_pair(label: str, dtype: str, swapped, loaded, reference: Reference, apis: list) -> PairResult:
    """The swap's answers against eager's, its calls counted around them: uncalled (or not
    hyport's, so uncounted), its answers are eager's own and say nothing of it."""
    before = swap_calls(apis)
    answers = [greedy(swapped, _encode(loaded, text, swapped.device), NEW_TOKENS)[0] for text in PROMPTS]
    perplexity = _perplexity(swapped, loaded)
    calls = swap_calls(apis) - before if apis else None
    if not calls:
        why = ("the swap was never called" if calls == 0
               else "the swap's calls cannot be counted (no hyport attention serves it)")
        return PairResult(label, dtype, identical=False, swapped_calls=calls, not_compared=f"not compared: {why}")
    token = loaded.tokenizer.decode
    pair = PairResult(label, dtype, identical=all(a == b for a, b in zip(reference.answers, answers)),
                      answers=[token(a, skip_special_tokens=True) for a in answers], swapped_calls=calls,
                      perplexity=perplexity, eager_perplexity=reference.perplexity)
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
    return on_device(encode_prompts(loaded, [prompt]), device)


@torch.no_grad()
def _perplexity(model, loaded) -> float:
    """exp(mean next-token cross-entropy) of the fixed text (plain text, no chat template)."""
    ids = loaded.tokenizer(PERPLEXITY_TEXT, return_tensors="pt")["input_ids"].to(model.device)
    logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
    return float(math.exp(float(loss)))
