"""Which layers LoRA adapts: one pattern for the pre-launch check and the workers."""

from __future__ import annotations

#: ``lora_target="all"``: every linear layer of the language model.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_target_pattern(targets: list[str]) -> str:
    """peft's ``target_modules`` regex: the language model's layers named in ``targets``
    (the vision tower stays frozen and untouched)."""
    names = ALL_LINEAR if targets == ["all"] else targets
    return rf".*language_model.*\.({'|'.join(names)})"
