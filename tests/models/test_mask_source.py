"""Masks that attend both ways, read from a model's own transformers code and its config
(models/mask_source.py), never from a list of names: packing is refused for such a model
(models/families.py says why), kept for a causal one."""

from __future__ import annotations

import re

import pytest
import transformers
from transformers import CONFIG_MAPPING

from hyport_lib.models.families import describe_config, packing_refusal
from hyport_lib.models.mask_source import bidirectional_mask


def _config(model_type: str, **changes) -> dict:
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    data = CONFIG_MAPPING[model_type]().to_dict()
    for key, value in changes.items():
        target = data.get("text_config") if key.startswith("text.") else data
        target[key.removeprefix("text.")] = value
    return data


#: What :func:`bidirectional_mask` says: the method, and the hook it widens the mask with.
WHERE = re.compile(r"^\w+\.\w+ widens the causal mask with "
                   r"(block_sequence_ids|an or_mask_function|an unmasked token_type_ids prefix)$")


@pytest.mark.parametrize("model_type, changes", [
    ("gemma3", {}),
    ("paligemma", {}),
    # Not named anywhere in hyport: found in their code.
    ("gemma3_text", {"use_bidirectional_attention": True}),
    ("gemma4", {"text.use_bidirectional_attention": "vision"}),
    ("molmo2", {}),
    # Its model class is another family's (Gemma3ForConditionalGeneration): read where defined.
    ("shieldgemma2", {}),
])
def test_packing_is_refused_for_a_model_whose_code_attends_both_ways(model_type, changes):
    data = _config(model_type, **changes)
    where = bidirectional_mask(data)
    assert where is not None and WHERE.match(where), (model_type, where)
    refusal = describe_config(data).packing_refusal
    assert refusal is not None, model_type
    assert refusal == packing_refusal(data) and f"({where})" in refusal
    assert refusal.startswith(f"{model_type} attends both ways") and refusal.endswith("use packing=false")
    assert "\n" not in refusal


@pytest.mark.parametrize("model_type, changes", [
    ("llama", {}), ("qwen2", {}), ("qwen3", {}), ("qwen2_vl", {}), ("llava", {}),
    ("gemma3_text", {}),  # the same code as the first refusal above, its switch off
    ("gemma4", {}),       # the same code as gemma4 above, its switch unset
])
def test_packing_is_kept_for_a_causal_model(model_type, changes):
    data = _config(model_type, **changes)
    assert bidirectional_mask(data) is None, model_type
    assert describe_config(data).packing_refusal is None, model_type


def test_cross_attention_is_no_mask_hook_but_still_refuses_packing():
    data = _config("mllama")
    assert bidirectional_mask(data) is None
    refusal = packing_refusal(data)
    assert refusal.startswith("mllama reads each row's images through cross-attention")
    assert refusal.endswith("use packing=false") and "\n" not in refusal


def test_a_model_type_transformers_does_not_know_is_not_read():
    assert bidirectional_mask({"model_type": "hyport_no_such_model", "use_bidirectional_attention": True}) is None
