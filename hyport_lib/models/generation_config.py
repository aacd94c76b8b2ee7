"""What one inference process runs (:class:`InferenceConfig`) and what one run measured
(:class:`InferenceOutcome`). Plain data: a parent process builds a config without
importing torch or touching a device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from hyport_lib.utils.values import from_known_keys


#: The batch when the user chose none; the workers fit it to the model (see
#: :func:`hyport_lib.models.generation.batch_prompts`), which is why it is compared by value.
DEFAULT_BATCH_PROMPTS: tuple[tuple[str, bool], ...] = (
    ("Describe the image.", True),
    ("How do I open a fridge?", False),
)


@dataclass
class InferenceConfig:
    """What to run and how. Nothing is checked here: stage 03's
    :class:`~hyport_lib.inference.params.Params` checks what a user types (and documents
    each field) and its plan derives this; library callers pass typed values.
    ``warmup_runs`` are untimed: a process's first call pays for the device context and
    kernel loading (on an NPU, operator compilation), so it is reported apart (``cold_s``).
    """

    model_path: str = "tiny"
    device: str = "cpu"
    dtype: str = "float32"
    attn_implementation: str = "eager"
    max_new_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0
    trust_remote_code: bool = False
    single_prompt: str = "Describe the image."
    batch_prompts: tuple[tuple[str, bool], ...] = DEFAULT_BATCH_PROMPTS
    image: Optional[str] = None
    enable_thinking: bool = False
    allow_download: bool = False
    warmup_runs: int = 1
    skip_not_applicable: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        """JSON-ready: the batch as ``[text, uses_image]`` lists."""
        data = asdict(self)
        data["batch_prompts"] = [[text, uses_image] for text, uses_image in self.batch_prompts]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "InferenceConfig":
        """A key this class does not have is an error naming it, never silently dropped."""
        data = dict(data)
        if "batch_prompts" in data:
            # JSON has no tuples; the pairs become what DEFAULT_BATCH_PROMPTS is compared with.
            data["batch_prompts"] = tuple((text, uses_image) for text, uses_image in data["batch_prompts"])
        return from_known_keys(cls, data)


@dataclass
class InferenceOutcome:
    """Timings and texts of one :func:`run_inference` call. The token counts and timings
    describe the single (image + text) inference, ``batch_s`` the batch. ``first_token_s``
    covers prefill, vision encoder and one decoding step. The two rates differ on purpose:
    ``tokens_per_s`` (the grid's "tokens/s" column) *includes* the prefill, so with few new
    tokens and a long image prompt it is far below the decoding speed; compare it only
    between runs with the same prompt and max_new_tokens. ``decode_tokens_per_s`` is
    decoding alone.
    """

    load_s: float
    first_token_s: float
    generate_s: float
    new_tokens: int
    tokens_per_s: float
    single_output: str
    batch_outputs: list[str]
    output_hash: str
    model_type: str
    num_parameters: int
    dtype: str
    device: str
    attn_implementation: str
    trust_remote_code: bool
    prompt_tokens: int = 0
    batch_s: float = 0.0
    memory: Optional[dict] = None
    model_path: str = ""
    decode_tokens_per_s: Optional[float] = None
    cold_s: Optional[float] = None
    warmup_runs: int = 0
    #: ``image-text-to-text`` or ``text-only``
    model_kind: str = ""
    #: prompt parts this model cannot take, each named with why (skipped, not run)
    not_applicable: list = field(default_factory=list)
    #: processor parts that could not be loaded, with why (e.g. video without torchvision)
    processor_unavailable: list = field(default_factory=list)
    #: calls into hyport's attention while this process ran the model (None: not hyport's), so a
    #: swapped grid shows the kernel ran instead of only naming it
    attention_calls: Optional[int] = None

    def to_dict(self) -> dict:
        return asdict(self)

