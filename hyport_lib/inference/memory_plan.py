"""Stage 03's memory: each card's worker holds the whole model, its KV cache and a forward
pass; judged before any worker starts (:mod:`hyport_lib.memory`)."""

from __future__ import annotations

from typing import Optional

from hyport_lib.backend import Backend
from hyport_lib.memory.capacity import capacity
from hyport_lib.memory.fit import require_fit
from hyport_lib.memory.model import Workload
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.memory.shape import ModelShape, loading_dtype
from hyport_lib.models.generation_config import InferenceConfig

#: Tokens allowed beside a prompt's text for the chat template and one image's tokens: an
#: allowance stated, not counted (the workers' processor is not loaded by the plan).
PROMPT_ALLOWANCE_TOKENS = 512


def prompt_tokens_bound(config: InferenceConfig) -> int:
    """The longest prompt's characters (a byte-level BPE token holds one character or more,
    so they bound its text's tokens) plus :data:`PROMPT_ALLOWANCE_TOKENS`."""
    texts = [config.single_prompt, *(text for text, _ in config.batch_prompts)]
    return max(len(str(text)) for text in texts) + PROMPT_ALLOWANCE_TOKENS


def plan_memory(backend: Backend, shape: ModelShape, folder: str, config: InferenceConfig, cards: int, *,
                card_memory_gib: Optional[float]) -> MemoryPlan:
    """The grid's memory on each card and on the host. Raises DoesNotFit (its text starts
    with the parameter to change) where a known capacity is exceeded."""
    workload = Workload("inference", backend.kind, loading_dtype(config.dtype, folder, shape),
                        world_size=max(1, cards), ranks_per_host=max(1, cards), new_tokens=config.max_new_tokens,
                        sequence=prompt_tokens_bound(config), micro_batch=max(1, len(config.batch_prompts)))
    return MemoryPlan.of(require_fit(shape, workload, capacity(backend, card_memory_gib)))


def sequence_note(config: InferenceConfig) -> str:
    longest = prompt_tokens_bound(config) - PROMPT_ALLOWANCE_TOKENS
    return (f"memory: seq {prompt_tokens_bound(config)} = the longest prompt's {longest} characters (a bound on "
            f"its text tokens) + {PROMPT_ALLOWANCE_TOKENS} allowed for the chat template and an image")
