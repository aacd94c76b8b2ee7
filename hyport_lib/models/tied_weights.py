"""Tied weights kept tied in a state dict made of copies.

accelerate's ``get_state_dict`` copies every tensor (ZeRO 0-3), and ``save_pretrained``
finds ties by shared storage: the copies would save the tensor twice (21 % larger for
SmolLM2-135M). :func:`retie` points a tied group at one tensor again, so
``save_pretrained`` drops the duplicates as it does for a model saved directly.
"""

from __future__ import annotations

from typing import MutableMapping


def tied_names(model) -> list[list[str]]:
    """Groups of parameter names that are one parameter in ``model`` (two or more each)."""
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def retie(model, state_dict: MutableMapping) -> MutableMapping:
    """``state_dict`` with every tied group of ``model`` sharing its first present tensor.

    Names absent from ``state_dict`` (a prefix of a wrapper, a frozen part left out) are
    left alone; the mapping is changed in place and returned.
    """
    for names in tied_names(model):
        present = [name for name in names if name in state_dict]
        for name in present[1:]:
            state_dict[name] = state_dict[present[0]]
    return state_dict
