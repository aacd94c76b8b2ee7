"""Which parts of stage 02's model check fit, decided by the memory model before anything
loads (docs/memory.md). The numerics run on the training proof's shrunk model and always fit;
the behaviour check loads the whole model once, in the check's dtype, and is left out, with
the figures, where the card or the host cannot hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyport_lib.memory.fit import Capacity, fit
from hyport_lib.memory.model import Workload
from hyport_lib.memory.shape import format_gib, model_shape
from hyport_lib.models.loading import auto_model_class, traits_of
from hyport_lib.proof.behaviour import NEW_TOKENS
from hyport_lib.proof.swap import shrunk_parameters
from hyport_lib.utils.printable import first_line

#: Tokens of the longest text the behaviour check reads: a prompt in its chat template or the
#: perplexity text (under 100 tokens in the tokenizers hyport knows; an image's tokens on top).
BEHAVIOUR_SEQUENCE = {"text": 256, "image": 2048}
#: The compact vocabulary's rows at most: the ids of two prompts, the packed row's text and
#: the special tokens the config names (shrunk.compact_vocabulary).
COMPACT_VOCABULARY_ROWS = 1024
#: The shrunk model in float32 while building, and its switched or rebuilt copy.
SHRUNK_COPIES = 2


@dataclass
class CheckMemory:
    """The behaviour check's fit on the whole model: ``lines`` its figures, ``left_out`` why it
    does not run ("" when it does)."""

    lines: list[str] = field(default_factory=list)
    left_out: str = ""


def shrunk_model_bytes(model_path: str, trust_remote_code: bool = False) -> int:
    """Host bytes of the numerics check's shrunk model: float32, :data:`SHRUNK_COPIES` copies,
    counted on the meta device."""
    from transformers import AutoConfig

    traits = traits_of(model_path, trust_remote_code)
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    rows = None if traits.multimodal else COMPACT_VOCABULARY_ROWS  # a VLM keeps its vocabulary
    count = shrunk_parameters(auto_model_class(traits), config, vocabulary_rows=rows,
                              trust_remote_code=trust_remote_code)
    return SHRUNK_COPIES * 4 * count


def plan_check_memory(model_path: str, *, kind: str, dtype: str, capacity: Capacity,
                      trust_remote_code: bool = False) -> CheckMemory:
    """The behaviour check's memory (the shrunk model's beside it) against ``capacity``."""
    shape = model_shape(model_path, trust_remote_code=trust_remote_code)
    multimodal = traits_of(model_path, trust_remote_code).multimodal
    try:
        shrunk = shrunk_model_bytes(model_path, trust_remote_code)
        shrunk_said = f"numerics on the shrunk model: {format_gib(shrunk)} of host RAM"
    except Exception as exc:  # noqa: BLE001 — the model's own code on the meta device: said, not counted
        shrunk = 0
        shrunk_said = (f"numerics on the shrunk model: not counted (its config does not build on the meta "
                       f"device: {type(exc).__name__}: {first_line(exc)})")
    workload = Workload(stage="model check", kind=kind, dtype=dtype, extra_host_bytes=shrunk,
                        new_tokens=NEW_TOKENS, sequence=BEHAVIOUR_SEQUENCE["image" if multimodal else "text"])
    found = fit(shape, workload, capacity)
    lines = [f"behaviour check on the whole model {line}" for line in found.lines()] + [shrunk_said]
    if found.fits:
        return CheckMemory(lines)
    return CheckMemory(lines, "the behaviour check (greedy answers, perplexity) on the whole model: "
                              f"{found.refusal()}; "
                              "the numerics run on the shrunk model")
