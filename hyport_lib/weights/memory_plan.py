"""Stage 05's memory: the reload and the logits parity load the whole model on this host's
CPU (:mod:`.reload`), judged from the folders' headers before their child starts."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hyport_lib.memory.capacity import capacity
from hyport_lib.memory.fit import DoesNotFit, Fit, fit, require_fit
from hyport_lib.memory.model import Workload
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.memory.shape import ModelShape, format_gib, loading_dtype, read_model_shape
from hyport_lib.weights.reload import PROMPT

#: The reload runs no forward pass: one token stands for none.
RELOAD_TOKENS = 1


class ParityDoesNotFit(DoesNotFit):
    """The parity compares float32 logits, so no dtype may be lowered: the way out is to
    leave it out (``logits_parity=False``), where the header comparison still runs."""

    def __init__(self, found: Fit):
        est, cap = found.estimate, found.capacity
        self.fit = found
        ValueError.__init__(
            self, f"logits_parity: the parity loads {est.shape.name} ({est.shape.parameters / 1e9:.3g} B parameters) "
                  f"in float32 on the CPU, one model at a time: {format_gib(est.host_bytes)} of host RAM > the "
                  f"host's {format_gib(cap.host_bytes)} ({cap.host_source}); set logits_parity=False (the "
                  f"checkpoint's tensors are still compared)")


def shape_of(folder: Path) -> Optional[ModelShape]:
    """None for a folder without safetensors headers (its other checks say what is wrong)."""
    try:
        return read_model_shape(folder)
    except (OSError, ValueError):
        return None


def plan_reload(folder: Path, dtype: str) -> Optional[MemoryPlan]:
    """The reload's host RAM; DoesNotFit naming ``dtype`` where bfloat16 would fit, else
    ``reload``. None where the folder has no headers to plan from."""
    shape = shape_of(folder)
    if shape is None:
        return None
    workload = Workload("reload", "cpu", loading_dtype(dtype, str(folder), shape), sequence=RELOAD_TOKENS)
    return MemoryPlan.of(require_fit(shape, workload, capacity(None)))


def plan_parity(folder: Path, other: Path) -> Optional[MemoryPlan]:
    """The parity's host RAM: the larger of the two models in float32 and a forward pass on
    the prompt (its characters bound its tokens); ParityDoesNotFit where the host cannot
    hold it. None where neither folder has headers."""
    shapes = [s for s in (shape_of(folder), shape_of(other)) if s is not None]
    if not shapes:
        return None
    shape = max(shapes, key=lambda s: s.parameters)
    # One model at a time (copies=1): the child frees the first before the second loads;
    # measured on CPU, it peaked at 1.45 GiB for a 187 M pair, a float32 reload at 1.42 GiB.
    found = fit(shape, Workload("reload", "cpu", "float32", sequence=len(PROMPT)), capacity(None), search=False)
    if not found.fits:
        raise ParityDoesNotFit(found)
    return MemoryPlan.of(found)
