"""The decoding half of an attention proof: what inference runs after the prompt.

Training and a prompt's prefill call attention with the query as long as the keys. An
inference grid then decodes: one new query at a time against a growing KV cache, with
the prompt's left padding still masked. A swap can be exact on the first and wrong on
the second (a causal mask aligned to the top-left instead of the bottom-right of the
score matrix masks every cached key but the first). :func:`decode_logits` runs
``generate`` greedily for a few tokens through the model's own generation code and keeps
each step's logits; :func:`compare_decoding` compares the eager and the swapped run step
by step, as far as both chose the same tokens (past a differing choice the two runs no
longer read the same prefix, and nothing after it is comparable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: New tokens decoded by an inference proof.
DECODE_STEPS = 4


@dataclass
class Decoding:
    """The new tokens (rows x steps) and each step's logits (rows x vocabulary), float32."""

    tokens: object
    logits: list


def decode_logits(model, inputs: dict, steps: int) -> Decoding:
    """``steps`` greedy new tokens of ``model`` on ``inputs`` (a left-padded prompt batch),
    with the KV cache, through ``generate``."""
    import torch

    kwargs = {k: v for k, v in inputs.items() if k not in ("labels", "use_cache")}
    pad = model.generation_config.pad_token_id
    with torch.no_grad():
        out = model.generate(**kwargs, max_new_tokens=steps, do_sample=False, use_cache=True,
                             output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0 if pad is None else pad)
    return Decoding(out.sequences[:, kwargs["input_ids"].shape[1]:], [step.float() for step in out.logits])


def compare_decoding(eager: Decoding, swapped: Decoding) -> tuple[float, int, Optional[str]]:
    """``(max |Δ logits| over the comparable steps, steps compared, problem or None)``."""
    compared, worst = 0, 0.0
    for step, (e, s) in enumerate(zip(eager.logits, swapped.logits)):
        worst = max(worst, float((e.double() - s.double()).abs().max()))
        compared = step + 1
        if step >= eager.tokens.shape[1] or step >= swapped.tokens.shape[1] or \
                not bool((eager.tokens[:, step] == swapped.tokens[:, step]).all()):
            break  # the next step would read different prefixes
    if compared == 0:
        return 0.0, 0, "cached decoding produced no step to compare"
    return worst, compared, None
