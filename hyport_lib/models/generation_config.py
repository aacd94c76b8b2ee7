"""What the inference stage runs (:class:`InferenceConfig`) and what one run measured
(:class:`InferenceOutcome`). Plain data: a parent process builds a config without
importing torch or touching a device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

from hyport_lib.utils.values import as_flag, as_float, as_int, from_known_keys

DTYPES = ("auto", "float32", "bfloat16", "float16")

DEFAULT_BATCH_PROMPTS: tuple[tuple[str, bool], ...] = (
    ("Describe the image.", True),
    ("How do I open a fridge?", False),
)


@dataclass
class InferenceConfig:
    """What to run and how.

    Attributes:
        model_path: ``"tiny"`` (the embedded model), a local folder or a hub id.
        device: torch device string: ``"cpu"``, ``"cuda:0"``, ``"npu:0"``; ``"auto"``
            takes card 0 of the best backend here.
        dtype: ``"auto"`` (the checkpoint's), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        attn_implementation: passed to ``from_pretrained``; the reference uses ``eager``.
        max_new_tokens: tokens generated per answer (an integer >= 1; an integral
            float or a string such as ``"16"`` is accepted, ``2.9`` is not).
        temperature: 0 means greedy (deterministic); above 0 samples with ``seed``.
        seed: seeds torch before each generate call (an integer).
        trust_remote_code: allow the checkpoint's own Python code (off by default; it
            runs arbitrary code from the model folder).
        single_prompt: the text of the single image + text inference.
        batch_prompts: ``(text, uses_image)`` pairs of the batch inference (a bare
            string is a text-only prompt).
        image: picture file for every image prompt; None draws the sample image.
        enable_thinking: passed to the chat template.
        allow_download: a ``model_path`` that is no folder may be a hub id to download;
            off by default (offline: a typo is an error, not a download attempt).
        skip_not_applicable: leave out the prompts this model cannot take (image prompts
            for a text-only model, text-only prompts for a processor that needs an image)
            instead of refusing them; each is named in the outcome. The default prompts
            are always fitted to the model this way (the user did not choose them).
        warmup_runs: untimed generate calls before the timed ones. The first call of a
            process pays for the device context, library and kernel loading (and, on an
            NPU, operator compilation): timing it measures start-up, not speed. Its
            time is reported apart (``cold_s``).

    Flags (``trust_remote_code``, ``enable_thinking``, ``uses_image``) take a bool,
    0/1 or ``"true"``/``"false"``/``"yes"``/``"no"`` (any case), since papermill and
    the command line may hand them over as text; anything else is an error rather
    than silently true.
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
    batch_prompts: Sequence[tuple[str, bool]] = DEFAULT_BATCH_PROMPTS
    image: Optional[str] = None
    enable_thinking: bool = False
    allow_download: bool = False
    warmup_runs: int = 1
    skip_not_applicable: bool = False

    def __post_init__(self) -> None:
        if not str(self.model_path or "").strip():
            raise ValueError("model_path: must not be empty (use 'tiny' for the embedded model)")
        if not str(self.device or "").strip():
            raise ValueError("device: must not be empty (e.g. 'cpu', 'cuda:0', 'npu:0')")
        self.dtype = str(self.dtype).replace("torch.", "")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {', '.join(DTYPES)}")
        max_new_tokens = as_int("max_new_tokens", self.max_new_tokens)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r}: must be at least 1")
        self.max_new_tokens = max_new_tokens
        temperature = as_float("temperature", self.temperature)
        if temperature < 0:
            raise ValueError(f"temperature={self.temperature!r}: must be >= 0 (0 = greedy)")
        self.temperature = temperature
        self.seed = as_int("seed", self.seed)
        self.trust_remote_code = as_flag("trust_remote_code", self.trust_remote_code)
        self.enable_thinking = as_flag("enable_thinking", self.enable_thinking)
        self.allow_download = as_flag("allow_download", self.allow_download)
        self.skip_not_applicable = as_flag("skip_not_applicable", self.skip_not_applicable)
        self.warmup_runs = as_int("warmup_runs", self.warmup_runs)
        if self.warmup_runs < 0:
            raise ValueError(f"warmup_runs={self.warmup_runs!r}: must be >= 0")
        self.batch_prompts = _normalise_batch_prompts(self.batch_prompts)
        if self.image is not None:
            self.image = str(self.image)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["batch_prompts"] = [[text, uses_image] for text, uses_image in self.batch_prompts]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "InferenceConfig":
        """Inverse of :meth:`to_dict`; unknown keys are an error (a typo, not a no-op)."""
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

    def to_dict(self) -> dict:
        return asdict(self)


def _normalise_batch_prompts(prompts) -> tuple[tuple[str, bool], ...]:
    """Accept ``(text, uses_image)`` pairs, dicts ``{"text": ..., "image": bool}`` as
    YAML writes them, or a bare string, which is a text-only prompt."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise ValueError(f"batch_prompts={prompts!r}: expected a list of [text, uses_image] pairs")
    result = []
    for i, item in enumerate(prompts):
        if isinstance(item, str):
            text, uses_image = item, False
        elif isinstance(item, dict):
            text, uses_image = item.get("text"), item.get("image", False)
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
            text, uses_image = item
        else:
            raise ValueError(f"batch_prompts[{i}]={item!r}: expected [text, uses_image]")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"batch_prompts[{i}]: text must be a non-empty string, got {text!r}")
        result.append((text, as_flag(f"batch_prompts[{i}]", uses_image)))
    if not result:
        raise ValueError("batch_prompts: must hold at least one prompt")
    return tuple(result)
