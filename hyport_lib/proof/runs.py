"""One model run on one batch the ways a proof compares them (:mod:`hyport_lib.proof.swap`):
forward and backward with the loss computed from the logits, the logits alone, the same model
in float64 (the error float32 itself makes there), greedy tokens decoded with the KV cache.
"""

from __future__ import annotations

from typing import Mapping, Optional


def model_batch(batch: Mapping) -> dict:
    """The collator's batch as the model takes it: hyport's bookkeeping keys dropped, float
    tensors in float32 (the proof's dtype)."""
    import torch

    inputs = {}
    for key, value in batch.items():
        if key.startswith("hyport_"):
            continue
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.float()
        inputs[key] = value
    # No KV cache: transformers keeps packed samples apart (from the restarting positions)
    # only without one, so that eager is the per-sample reference on packed rows.
    inputs["use_cache"] = False
    return inputs


def forward_backward(model, inputs: dict, per_sample=None, lengths=None):
    """``(logits of the compared tokens, loss, gradients, tokens compared per row)``. The
    loss is computed from the logits, the same way for both models, so a packed row and its
    samples run one by one (``per_sample``) give the same number when attention is exact.
    ``lengths``: compare only each row's first tokens (a packed row's real ones)."""
    import torch

    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        rows = logit_rows(model, inputs, per_sample, lengths)
        loss = causal_lm_loss(rows, inputs["labels"])
        loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return compared_rows(rows, inputs, per_sample, lengths), float(loss.detach()), grads, [len(row) for row in rows]


def logit_rows(model, inputs: dict, per_sample=None, lengths=None) -> list:
    import torch

    if per_sample is None:
        logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
        return [logits[i, :lengths[i]] if lengths else logits[i] for i in range(logits.shape[0])]
    return [torch.cat([model(**{k: v for k, v in one.items() if k != "labels"}).logits[0] for one in row])
            for row in per_sample]


def compared_rows(rows: list, inputs: dict, per_sample, lengths) -> list:
    mask = inputs.get("attention_mask")
    kept = [row.detach() for row in rows]
    if per_sample is None and lengths is None and mask is not None and mask.dim() == 2:
        kept = [row[mask[i].bool()] for i, row in enumerate(kept)]  # padding is never read
    return kept


def float32_noise(model, inputs: dict, per_sample, eager_logits: list) -> Optional[float]:
    """max |Δ| between eager's float32 logits and the same model's in float64: the error
    float32 itself makes on this model and batch. None when the model does not run in float64
    (grouped expert kernels). float32 -> float64 -> float32 is exact: the weights come back."""
    import torch

    def wider(batch: dict) -> dict:
        return {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                for k, v in batch.items()}

    try:
        model.double()
        with torch.no_grad():
            rows = logit_rows(model, wider(inputs), [[wider(one) for one in row] for row in per_sample]
                               if per_sample else None)
    except Exception:  # noqa: BLE001 — no float64 path: the table's bound is used, and said
        return None
    finally:
        model.float()
    exact = compared_rows(rows, inputs, per_sample, None)
    return max(float((ref.double() - out.double()).abs().max()) for ref, out in zip(exact, eager_logits))


def causal_lm_loss(rows, labels):
    """Row i predicts ``labels[i, 1:len]``, as the models compute it."""
    import torch

    logits = torch.cat([row[:-1] for row in rows]).float()
    targets = torch.cat([labels[i, 1:len(row)] for i, row in enumerate(rows)])
    return torch.nn.functional.cross_entropy(logits, targets.to(logits.device), ignore_index=-100)


def first_non_finite(grads: Mapping) -> str:
    import torch

    return next((name for name in sorted(grads) if not torch.isfinite(grads[name]).all()), "")


def decode_logits(model, inputs: dict, steps: int) -> list:
    """Each step's raw logits (step 0: the prefill's) of ``steps`` tokens decoded with the KV
    cache, each forced to the row's last prompt token that ends no sequence: eager and the
    swap read the same prefixes whatever their logits. A swap can be exact on the prefill
    and wrong here (a causal mask aligned top-left masks every cached key but the first)."""
    import torch

    kwargs = {k: v for k, v in inputs.items() if k not in ("labels", "use_cache")}
    ends = model.generation_config.eos_token_id
    ends = set(ends if isinstance(ends, (list, tuple)) else [ends]) - {None}
    forced = [next((t for t in reversed(row) if t not in ends), row[-1]) for row in kwargs["input_ids"].tolist()]
    with torch.no_grad():  # output_logits: the raw logits, before forcing the token
        out = model.generate(**kwargs, max_new_tokens=steps, do_sample=False, use_cache=True,
                             output_logits=True, return_dict_in_generate=True,
                             prefix_allowed_tokens_fn=lambda row, _: [forced[row]],
                             pad_token_id=_unused_pad(kwargs["input_ids"]))
    return [step.float() for step in out.logits]


def _unused_pad(input_ids) -> int:
    """A pad id no row ends with: no row finishes, so it is never written, but transformers
    4.x reads a prompt ending in the pad id as right padding and warns."""
    last = set(input_ids[:, -1].tolist())
    return next(i for i in range(len(last) + 1) if i not in last)
