"""Whether answers can mean anything (random weights cannot). No torch here: the report's
views import it.

Stage 02 compares the swap's answers with eager's and stage 04 shows answers before and
after training. On random weights the logits are nearly flat: a greedy token is a coin
toss and an answer is noise, so both say "random weights: not meaningful" instead of
showing it as a result. A model is known to be random when it is the embedded tiny model,
or when the greedy token's mean probability stays under :data:`FLAT_TOP1`.
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
