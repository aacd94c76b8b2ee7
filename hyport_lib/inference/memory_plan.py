"""Stage 03's memory: each card's worker holds the whole model, its KV cache and a forward
pass; judged before any worker starts (:mod:`hyport_lib.memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hyport_lib.backend import Backend
from hyport_lib.memory.capacity import capacity
from hyport_lib.memory.fit import DoesNotFit, Fit, fit
from hyport_lib.memory.model import STORED_DTYPES, Workload
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.memory.shape import ModelShape, read_model_shape, shape_of_model
from hyport_lib.models.families import read_config
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.loading import build_empty_model

#: Tokens allowed beside a prompt's text for the chat template and one image's tokens: an
#: allowance stated, not counted (the workers' processor is not loaded by the plan).
PROMPT_ALLOWANCE_TOKENS = 512


def prompt_tokens_bound(config: InferenceConfig) -> int:
    """The longest prompt's characters (a byte-level BPE token holds one character or more,
    so they bound its text's tokens) plus :data:`PROMPT_ALLOWANCE_TOKENS`."""
    texts = [config.single_prompt, *(text for text, _ in config.batch_prompts)]
    return max(len(str(text)) for text in texts) + PROMPT_ALLOWANCE_TOKENS


def model_shape(folder: str, *, trust_remote_code: bool) -> ModelShape:
    """From the safetensors headers; a folder without them (the tiny model, a .bin
    checkpoint) from its empty model on the meta device."""
    try:
        return read_model_shape(folder)
    except ValueError as headers:
        model = build_empty_model(folder, trust_remote_code=trust_remote_code)
        return shape_of_model(model, name=Path(folder).name,
                              source=f"the empty model built from {folder}/config.json ({headers})")


def grid_dtype(dtype: str, folder: str, shape: ModelShape) -> str:
    """``auto`` as ``from_pretrained`` reads it: the config's dtype, else the stored one."""
    if dtype != "auto":
        return dtype
    config = read_config(folder)
    named = str(config.get("dtype") or config.get("torch_dtype") or "").replace("torch.", "")
    return named if named in ("float32", "bfloat16", "float16") else STORED_DTYPES.get(shape.stored_dtype, "float32")


def refused_parameter(found: Fit) -> str:
    """The parameter of stage 03 that the shortfall points to: ``dtype`` where bfloat16
    would fit or a card is short (each card holds the whole model), else ``num_cards`` (a
    host holding fewer workers)."""
    change = found.nearest[0] if found.nearest else ""
    if change.startswith("precision"):
        return "dtype"
    if "process" in change or found.card_fits is not False:
        return "num_cards"
    return "dtype"


def plan_memory(backend: Backend, shape: ModelShape, folder: str, config: InferenceConfig, cards: int, *,
                card_memory_gib: Optional[float]) -> MemoryPlan:
    """The grid's memory on each card and on the host. Raises DoesNotFit (its text starts
    with the parameter to change) where a known capacity is exceeded."""
    workload = Workload("inference", backend.kind, grid_dtype(config.dtype, folder, shape),
                        world_size=max(1, cards), ranks_per_host=max(1, cards), new_tokens=config.max_new_tokens,
                        sequence=prompt_tokens_bound(config), micro_batch=max(1, len(config.batch_prompts)))
    found = fit(shape, workload, capacity(backend, card_memory_gib))
    if not found.fits:
        raise DoesNotFit(found, refused_parameter(found))
    return MemoryPlan.of(found)


def sequence_note(config: InferenceConfig) -> str:
    longest = prompt_tokens_bound(config) - PROMPT_ALLOWANCE_TOKENS
    return (f"memory: seq {prompt_tokens_bound(config)} = the longest prompt's {longest} characters (a bound on "
            f"its text tokens) + {PROMPT_ALLOWANCE_TOKENS} allowed for the chat template and an image")
