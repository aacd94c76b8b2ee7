"""The tiny model a port's proof builds from the user's code (proof/port_model.py): its
config, the eager switch, the output it compares, and flash_attn hidden from the port."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch

from hyport_lib.proof import port_model


def test_the_tiny_config_keeps_the_checkpoints_fields_shrinks_what_the_class_has_and_overrides_last():
    from transformers import LlamaConfig

    base = {"hidden_size": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0},
            "architectures": ["LlamaForCausalLM"], "auto_map": {"AutoModel": "m.M"}}
    kwargs = port_model.tiny_config_kwargs(LlamaConfig, torch.bfloat16, base, {"vocab_size": 99})
    assert kwargs["hidden_size"] == port_model.SHRINK["hidden_size"]  # shrunk, the checkpoint's value dropped
    assert kwargs["rope_scaling"] == base["rope_scaling"]  # a field only the checkpoint sets is kept
    assert "architectures" not in kwargs and "auto_map" not in kwargs
    assert "n_embd" not in kwargs  # a size this config does not have is not added
    assert kwargs["vocab_size"] == 99  # the user's override last
    assert port_model.without_flash({"use_flash_attn": True, "x": 1}) == {"use_flash_attn": False, "x": 1}


def test_the_trees_config_json_is_read_or_refused_naming_the_file(tmp_path):
    assert port_model.read_config_json(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert port_model.read_config_json(tmp_path) == {"hidden_size": 8}
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ValueError, match="config.json: expected a JSON object"):
        port_model.read_config_json(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        port_model.read_config_json(tmp_path)


def test_the_compared_output_is_the_logits_else_the_first_tensor():
    logits, other = torch.ones(2), torch.zeros(3)
    assert port_model.first_tensor(type("Out", (), {"logits": logits})()) is logits
    assert port_model.first_tensor(other) is other
    assert port_model.first_tensor(("text", other)) is other
    assert port_model.first_tensor({"hidden": other}) is other
    with pytest.raises(TypeError, match="holds no tensor"):
        port_model.first_tensor(("text",))


def test_flash_attn_is_unimportable_inside_the_block_and_put_back_after(monkeypatch):
    planted = type(sys)("flash_attn")
    monkeypatch.setitem(sys.modules, "flash_attn", planted)
    with port_model.without_flash_attn():
        with pytest.raises(ModuleNotFoundError, match="hidden from the port"):
            importlib.import_module("flash_attn")
        with pytest.raises(ModuleNotFoundError, match="hidden from the port"):
            importlib.import_module("flash_attn.bert_padding")
    assert sys.modules["flash_attn"] is planted
