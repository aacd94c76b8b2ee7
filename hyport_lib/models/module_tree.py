"""Parts found in a built model's module tree, whatever its family. The language model sits
at a different path in every family (``model.language_model``, ``model.text_model``,
``model``): :func:`language_model_path` finds it in the model itself, and the LoRA pattern
names layers under it only, so the vision tower stays untouched.
"""

from __future__ import annotations

import re
from typing import MutableMapping

#: ``lora_target="all"``: the usual linear layers of a decoder's attention and MLP.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def language_model_path(model) -> str:
    """Dotted path of the decoder inside ``model`` (``""``: the model itself): transformers'
    ``get_decoder``, else the sub-module holding token embeddings and layers; ValueError
    where none looks like a decoder."""
    decoder = _decoder(model)
    for name, module in model.named_modules():
        if module is decoder:
            return name
    raise ValueError(f"{type(model).__name__}: no language model (token embeddings and "
                     "decoder layers) found in its module tree")


def _decoder(model):
    get = getattr(model, "get_decoder", None)
    if callable(get):
        try:
            decoder = get()
        except (AttributeError, NotImplementedError):
            decoder = None
        if decoder is not None and hasattr(decoder, "layers"):
            return decoder
    for _, module in model.named_modules():
        if hasattr(module, "embed_tokens") and hasattr(module, "layers"):
            return module
    return None


def lora_target_pattern(prefix: str, targets: list[str]) -> str:
    """peft's ``target_modules`` regex for the layers named in ``targets`` under ``prefix``."""
    names = ALL_LINEAR if targets == ["all"] else targets
    under = rf"{re.escape(prefix)}\..*" if prefix else r".*"
    return rf"(.*\.)?{under}\.({'|'.join(re.escape(n) for n in names)})"


def matched_layers(model, pattern: str) -> list[str]:
    """The modules ``pattern`` selects, as peft matches them: the full name."""
    compiled = re.compile(pattern)
    return [name for name, _ in model.named_modules() if name and compiled.fullmatch(name)]


def leaf_names(model, prefix: str) -> list[str]:
    """The first 20 distinct last names of the leaf modules under ``prefix``, for messages."""
    start = f"{prefix}." if prefix else ""
    leaves = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if name.startswith(start) and not list(module.children())})
    return leaves[:20]


def fused_experts(model, prefix: str) -> list[str]:
    """MoE expert blocks under ``prefix`` that hold their weights as fused parameters
    (transformers 5: one 3-D tensor per projection, no ``nn.Linear`` per expert): LoRA
    on named linear layers does not reach them."""
    import torch

    start = f"{prefix}." if prefix else ""
    return [name for name, module in model.named_modules()
            if name.startswith(start) and name.rsplit(".", 1)[-1] == "experts"
            and any(p.dim() >= 3 for p in module.parameters(recurse=False))
            and not any(isinstance(m, torch.nn.Linear) for m in module.modules())]


def tied_names(model) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def retie(model, state_dict: MutableMapping) -> MutableMapping:
    """``state_dict`` (changed in place) with every tied group of ``model`` sharing its first
    present tensor. accelerate's ``get_state_dict`` copies every tensor (ZeRO 0-3) and
    ``save_pretrained`` finds ties by shared storage: the copies would save a tied tensor
    twice (21 % larger for SmolLM2-135M). Names absent from ``state_dict`` (a wrapper's
    prefix, a frozen part left out) are left alone.
    """
    for names in tied_names(model):
        present = [name for name in names if name in state_dict]
        for name in present[1:]:
            state_dict[name] = state_dict[present[0]]
    return state_dict


def rope_index_function(model):
    """The model's own ``get_rope_index``, or None; looked up on its sub-modules too (the
    VLM's inner model holds it, and so a peft- or DeepSpeed-wrapped model is found)."""
    for module in model.modules():
        function = getattr(type(module), "get_rope_index", None)
        if callable(function):
            return getattr(module, "get_rope_index")
    return None
