"""One model run on one batch the ways a proof compares them (proof/runs.py)."""

from __future__ import annotations

import torch

from hyport_lib.proof.runs import first_non_finite, float32_noise, forward_backward, model_batch


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM._from_config(config, attn_implementation="eager").float().eval()


def _batch():
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    return model_batch({"input_ids": ids, "labels": ids.clone(), "attention_mask": mask, "hyport_tokens": 24})


def test_the_float64_run_measures_float32s_error_and_gives_the_weights_back():
    model, inputs = _llama(), _batch()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    logits = forward_backward(model, inputs)[0]
    noise = float32_noise(model, inputs, None, logits)
    assert 0 < noise < 1e-5
    after = model.state_dict()
    assert all(after[name].dtype == tensor.dtype and torch.equal(after[name], tensor) for name, tensor in before.items())
    assert [len(row) for row in logits] == [12, 9]  # padding is never compared


def test_a_model_without_a_float64_path_gives_no_figure(monkeypatch):
    model, inputs = _llama(), _batch()
    logits = forward_backward(model, inputs)[0]
    real = model.forward

    def float32_only(**kwargs):
        if next(model.parameters()).dtype == torch.float64:
            raise RuntimeError("grouped_mm: float64 is not supported")
        return real(**kwargs)

    monkeypatch.setattr(model, "forward", float32_only)
    assert float32_noise(model, inputs, None, logits) is None
    assert next(model.parameters()).dtype == torch.float32  # given back even when it raised


def test_the_first_non_finite_gradient_is_named_in_a_stable_order():
    grads = {"b.weight": torch.tensor([float("nan")]), "a.weight": torch.ones(1), "c.bias": torch.tensor([float("inf")])}
    assert first_non_finite(grads) == "b.weight"
    assert first_non_finite({"a": torch.zeros(2)}) == ""
