"""Parts found in a model's module tree (models/module_tree.py): LoRA's layers under the
language model only, a tied weight saved once from a state dict of copies. (The same on
every family of the zoo: test_zoo_stages.py.)"""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM

from hyport_lib.models.module_tree import (ALL_LINEAR, fused_experts, language_model_path, leaf_names,
                                          lora_target_pattern, matched_layers, retie, rope_index_function,
                                          tied_names)


@pytest.fixture(scope="module")
def tied_model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def _saved_names(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        return set(handle.keys())


def test_the_tied_pair_is_found(tied_model):
    assert tied_names(tied_model) == [["model.embed_tokens.weight", "lm_head.weight"]]


def test_copies_of_a_tied_weight_are_saved_once_after_retie(tied_model, tmp_path):
    # what accelerate's get_state_dict hands back under ZeRO 0-2: a copy of every tensor
    copies = {name: tensor.clone() for name, tensor in tied_model.state_dict().items()}
    tied_model.save_pretrained(tmp_path / "copies", state_dict=dict(copies))
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= _saved_names(tmp_path / "copies")  # the defect

    tied_model.save_pretrained(tmp_path / "retied", state_dict=retie(tied_model, dict(copies)))
    saved = _saved_names(tmp_path / "retied")
    assert "model.embed_tokens.weight" in saved and "lm_head.weight" not in saved
    assert saved == _saved_names_direct(tied_model, tmp_path / "direct")
    reloaded = LlamaForCausalLM.from_pretrained(tmp_path / "retied")
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert torch.equal(reloaded.lm_head.weight, tied_model.lm_head.weight)


def _saved_names_direct(model, folder) -> set[str]:
    model.save_pretrained(folder)
    return _saved_names(folder)


def test_names_absent_from_the_state_dict_are_left_alone(tied_model):
    partial = {"lm_head.weight": torch.zeros(1)}
    assert retie(tied_model, partial) == {"lm_head.weight": partial["lm_head.weight"]}


def test_lora_names_the_language_models_linear_layers_only(tied_model):
    prefix = language_model_path(tied_model)
    assert prefix == "model"
    layers = matched_layers(tied_model, lora_target_pattern(prefix, ["all"]))
    assert layers and all(name.startswith("model.layers.0.") for name in layers)
    assert sorted(name.rsplit(".", 1)[-1] for name in layers) == sorted(ALL_LINEAR)
    assert matched_layers(tied_model, lora_target_pattern(prefix, ["q_proj"])) == ["model.layers.0.self_attn.q_proj"]
    assert matched_layers(tied_model, lora_target_pattern(prefix, ["lm_head"])) == []  # outside the prefix
    assert {"q_proj", "embed_tokens", "lm_head"} - set(leaf_names(tied_model, "")) == set()
    assert "lm_head" not in leaf_names(tied_model, prefix)
    assert fused_experts(tied_model, prefix) == [] and rope_index_function(tied_model) is None


def test_a_model_without_a_decoder_is_refused_naming_its_class():
    with pytest.raises(ValueError, match=r"^Linear: no language model"):
        language_model_path(torch.nn.Linear(2, 2))
