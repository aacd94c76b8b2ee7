"""Whether answers can mean anything: on random weights (the tiny model, or flat logits
under :data:`FLAT_TOP1`) a greedy token is a coin toss, so stages 02 and 04 say "random
weights: not meaningful" instead of showing answers. No torch here: the report imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hyport_lib.models.tiny import MARKER_FILE as TINY_MARKER
from hyport_lib.models.tiny import TINY_MODEL_NAME

#: Mean probability of the greedy token below which the logits are called flat.
FLAT_TOP1 = 0.2
RANDOM_WEIGHTS = "random weights: not meaningful"


def is_tiny_model(model_path: str) -> bool:
    """The embedded tiny model, by name or by folder (random weights by construction)."""
    return str(model_path) == TINY_MODEL_NAME or (Path(str(model_path)) / TINY_MARKER).is_file()


def random_weights_reason(model_path: str, mean_top1: Optional[float] = None) -> Optional[str]:
    """Why answers of this model mean nothing, or None when they may."""
    if is_tiny_model(model_path):
        return f"{RANDOM_WEIGHTS} (the embedded tiny model)"
    if mean_top1 is not None and mean_top1 < FLAT_TOP1:
        return (f"{RANDOM_WEIGHTS} (the greedy token's mean probability is {mean_top1:.2f}: "
                "flat logits, as random weights give)")
    return None
