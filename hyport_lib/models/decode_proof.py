"""The decoding half of an attention proof: one new query at a time against a growing KV
cache, the prompt's left padding still masked. A swap can be exact on the prefill and
wrong here (a causal mask aligned top-left instead of bottom-right masks every cached key
but the first). :func:`decode_logits` forces each new token, so eager and swap read the
same prefixes whatever their logits; :func:`compare_decoding` compares them.
"""

from __future__ import annotations

from typing import Optional

#: New tokens decoded by an inference proof: the prefill's logits, then DECODE_STEPS - 1
#: cached decoding steps.
DECODE_STEPS = 4


class _ForceTokens:
    """A logits processor choosing ``tokens[row]`` at every step (the raw logits, which
    ``output_logits`` returns, are left as they are)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def __call__(self, input_ids, scores):
        import torch

        forced = torch.full_like(scores, float("-inf"))
        forced.scatter_(1, self.tokens.to(scores.device)[:, None], 0.0)
        return forced


def decode_logits(model, inputs: dict, steps: int) -> list:
    """Each step's raw logits (rows x vocabulary, float32; step 0 is the prefill's) of
    ``steps`` new tokens of ``model`` on ``inputs`` (a left-padded prompt batch), decoded
    with the KV cache through ``generate``, each forced to the row's last prompt token that
    ends no sequence."""
    import torch
    from transformers import LogitsProcessorList

    kwargs = {k: v for k, v in inputs.items() if k not in ("labels", "use_cache")}
    forced = _forced_tokens(kwargs["input_ids"], model.generation_config.eos_token_id)
    with torch.no_grad():
        out = model.generate(**kwargs, max_new_tokens=steps, do_sample=False, use_cache=True,
                             output_logits=True, return_dict_in_generate=True,
                             logits_processor=LogitsProcessorList([_ForceTokens(forced)]),
                             pad_token_id=_unused_pad(kwargs["input_ids"]))
    return [step.float() for step in out.logits]


def _forced_tokens(input_ids, eos):
    """Per row, the last prompt token that does not end a sequence (decoding must not stop)."""
    import torch

    ends = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
    chosen = [next((t for t in reversed(row) if t not in ends), row[-1]) for row in input_ids.tolist()]
    return torch.tensor(chosen, dtype=input_ids.dtype, device=input_ids.device)


def _unused_pad(input_ids) -> int:
    """A pad id no row ends with: no row finishes, so it is never written, but transformers
    4.x reads a prompt ending in the pad id as right padding and warns."""
    last = set(input_ids[:, -1].tolist())
    return next(i for i in range(len(last) + 1) if i not in last)


def compare_decoding(eager: list, swapped: list, tolerance: float) -> tuple[float, int, Optional[str]]:
    """``(max |Δ logits| over the cached decoding steps, cached steps compared, problem or None)``
    of two :func:`decode_logits`. The prefill step is the forward pass's, compared already."""
    if len(eager) != len(swapped):
        return 0.0, 0, f"cached decoding ran {len(swapped)} steps, eager {len(eager)}"
    cached = list(zip(eager, swapped))[1:]
    if not cached:
        return 0.0, 0, "cached decoding produced no step past the prompt to compare"
    worst = max(float((e.double() - s.double()).abs().max()) for e, s in cached)
    problem = (f"cached decoding: logits differ from eager by {worst:.3g} (> {tolerance:g}) within "
               f"{len(cached)} step(s)" if worst > tolerance else None)
    return worst, len(cached), problem
