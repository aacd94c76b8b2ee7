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
    """What to run and how, as whoever builds it has already checked it.

    No value is checked here: stage 03's :class:`~hyport_lib.inference.params.Params`
    checks what a user types, and its plan derives this from it; library callers pass
    typed values.

    Attributes:
        model_path: ``"tiny"`` (the embedded model), a local folder or a hub id.
        device: torch device string: ``"cpu"``, ``"cuda:0"``, ``"npu:0"``; ``"auto"``
            takes card 0 of the best backend here.
        dtype: ``"auto"`` (the checkpoint's), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        attn_implementation: passed to ``from_pretrained``; the reference uses ``eager``.
        max_new_tokens: tokens generated per answer.
        temperature: 0 means greedy (deterministic); above 0 samples with ``seed``.
        seed: seeds torch before each generate call.
        trust_remote_code: allow the checkpoint's own Python code (it runs arbitrary
            code from the model folder).
        single_prompt: the text of the single image + text inference.
        batch_prompts: ``(text, uses_image)`` pairs of the batch inference.
        image: picture file for every image prompt; None draws the sample image.
        enable_thinking: passed to the chat template.
        allow_download: a ``model_path`` that is no folder may be a hub id to download
            (offline otherwise: a typo is an error, not a download attempt).
        skip_not_applicable: leave out the prompts this model cannot take (image prompts
            for a text-only model, text-only prompts for a processor that needs an image)
            instead of refusing them; each is named in the outcome. The default prompts
            are always fitted to the model this way (the user did not choose them).
        warmup_runs: untimed generate calls before the timed ones. The first call of a
            process pays for the device context, library and kernel loading (and, on an
            NPU, operator compilation): timing it measures start-up, not speed. Its
            time is reported apart (``cold_s``).
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
        """Inverse of :meth:`to_dict` (how a worker reads its configuration); a key this
        class does not have is an error naming it, never silently dropped."""
        data = dict(data)
        if "batch_prompts" in data:
            # JSON has no tuples; the pairs become what DEFAULT_BATCH_PROMPTS is compared with.
            data["batch_prompts"] = tuple((text, uses_image) for text, uses_image in data["batch_prompts"])
        return from_known_keys(cls, data)


@dataclass
class InferenceOutcome:
    """Timings and texts of one :func:`run_inference` call.

    ``new_tokens``, ``first_token_s``, ``generate_s``, ``tokens_per_s`` and
    ``decode_tokens_per_s`` describe the single (image + text) inference; ``batch_s``
    the batch. ``output_hash`` is the sha256 of the single output and the batch
    outputs joined by newlines: equal hashes mean equal texts. ``memory`` is the
    backend's memory reading after generation.

    The two rates differ on purpose:

    * ``tokens_per_s`` (the grid's "tokens/s" column) is ``new_tokens / generate_s``:
      end to end, so it *includes* the prefill of the prompt and the vision encoder.
      With few new tokens and a long (image) prompt it is far below the decoding
      speed; compare it only between runs with the same prompt and max_new_tokens.
    * ``decode_tokens_per_s`` is ``(new_tokens - 1) / (generate_s - first_token_s)``:
      the tokens after the first over the time after the first, i.e. decoding alone.
      None when it cannot be measured (a single new token, or no first-token time).

    Attributes:
        load_s: reading processor and weights and moving them to the device.
        first_token_s: start of generate() to the first new token (prefill, vision
            encoder and one decoding step).
        generate_s: the whole generate() call of the single inference.
        new_tokens: tokens generated by the single inference.
        tokens_per_s: ``new_tokens / generate_s``, prefill included (see above).
        decode_tokens_per_s: decoding speed without the prefill, or None (see above).
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

