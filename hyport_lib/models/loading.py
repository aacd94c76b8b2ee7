"""Loading any checkpoint the way its family expects: the right auto class, the processor.

* :func:`load_model` picks the auto class from the config (:mod:`hyport_lib.models.families`):
  ``AutoModelForImageTextToText`` for a VLM, ``AutoModelForCausalLM`` for a text-only
  model; remote code (``auto_map``) only with ``trust_remote_code``.
* :func:`load_processor` loads the processor whole where it can. The Qwen-VL family,
  LLaVA-OneVision and InternVL ship a video processor that needs torchvision in
  transformers 5; where torchvision is missing (the CPU stack hyport tests on: the only
  torchvision built for its torch is a CUDA build that does not import), the processor
  is built from its image processor and tokenizer alone and says that video is
  unavailable. A text-only model gets its tokenizer.

torch and transformers are imported inside the functions: a launcher process can plan
without importing either.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hyport_lib.models.families import ModelTraits, describe_config, read_config
from hyport_lib.models.tiny import TINY_MODEL_NAME


@dataclass
class LoadedProcessor:
    """A processor and what it can do.

    Attributes:
        processor: the processor (a tokenizer for a text-only model).
        traits: the checkpoint's :class:`~hyport_lib.models.families.ModelTraits`.
        unavailable: parts that could not be loaded, each with why (e.g. the video
            processor without torchvision); empty when the processor loaded whole.
        prompt_format: ``chat`` (the processor's chat template) or ``prefix`` (no chat
            template: the prompt text goes in as is, as PaliGemma expects).
    """

    processor: Any
    traits: ModelTraits
    unavailable: list[str] = field(default_factory=list)
    prompt_format: str = "chat"

    @property
    def tokenizer(self):
        return tokenizer_of(self.processor)


def tokenizer_of(processor):
    """The tokenizer inside a processor (or the tokenizer itself)."""
    return getattr(processor, "tokenizer", processor)


@functools.lru_cache(maxsize=None)
def torchvision_problem() -> Optional[str]:
    """Why torchvision cannot serve the video processors (None: it imports). A
    torchvision built for another torch is installed but fails to import, which is as
    good as none."""
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed"
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 — any import failure means no video processors
        return f"torchvision does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return None


def has_torchvision() -> bool:
    return torchvision_problem() is None


def wants_video_processor(model_path: Optional[str]) -> tuple[str, Optional[bool]]:
    """``(model type, whether its processor includes a video processor)`` for a model
    path, read from its config without loading anything; the flag is None when the
    model cannot be told (a hub id, a folder without a readable config)."""
    import json

    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    text = str(model_path or "").strip()
    if text == TINY_MODEL_NAME:
        model_type = "llava"
    else:
        try:
            model_type = str(json.loads((Path(text).expanduser() / "config.json").read_text(
                encoding="utf-8")).get("model_type") or "")
        except (OSError, ValueError, AttributeError):
            return "", None
    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, str(name), None) if name else None
    if cls is None:
        return model_type, False if model_type else None
    attributes = cls.get_attributes() if hasattr(cls, "get_attributes") else getattr(cls, "attributes", [])
    return model_type, any("video" in a for a in attributes)


def _common(path: str, trust_remote_code: bool) -> dict:
    common: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if Path(path).is_dir():
        common["local_files_only"] = True
    return common


def traits_of(path: str, trust_remote_code: bool = False) -> ModelTraits:
    """Traits of a local folder (read from config.json) or a hub id (through AutoConfig)."""
    if Path(path).is_dir():
        return describe_config(read_config(path))
    from transformers import AutoConfig

    return describe_config(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code).to_dict())


def load_processor(path: str, *, trust_remote_code: bool = False) -> LoadedProcessor:
    """The checkpoint's processor (see the module docstring).

    Raises:
        Whatever transformers raises for a processor that does not load for another
        reason than a missing torchvision.
    """
    traits = traits_of(path, trust_remote_code)
    common = _common(path, trust_remote_code)
    unavailable: list[str] = []
    if not traits.multimodal:
        from transformers import AutoTokenizer

        processor = AutoTokenizer.from_pretrained(path, **common)
    else:
        from transformers import AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(path, **common)
        except (ImportError, AttributeError, ValueError, TypeError, OSError) as exc:
            if has_torchvision() or not _needs_torchvision(exc):
                raise
            processor = _image_side_processor(path, traits, common)
            unavailable.append(f"video processor: needs torchvision ({torchvision_problem()}); "
                               "images are processed, videos are not")
        else:
            if getattr(processor, "video_processor", "absent") is None:
                unavailable.append("video processor: not in this checkpoint")
    template = getattr(processor, "chat_template", None) or getattr(tokenizer_of(processor), "chat_template", None)
    return LoadedProcessor(processor, traits, unavailable, "chat" if template else "prefix")


def _needs_torchvision(exc: BaseException) -> bool:
    seen: Optional[BaseException] = exc
    while seen is not None:
        if "torchvision" in str(seen).lower() or "video" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _processor_class(path: str, traits: ModelTraits):
    import json

    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = None
    config_file = Path(path) / "processor_config.json"
    if config_file.is_file():
        name = json.loads(config_file.read_text(encoding="utf-8")).get("processor_class")
    name = name or PROCESSOR_MAPPING_NAMES.get(traits.model_type)
    cls = getattr(transformers, str(name), None) if name else None
    if cls is None:
        raise ValueError(f"{path}: no processor class known for model_type={traits.model_type!r}")
    return cls


def _image_side_processor(path: str, traits: ModelTraits, common: dict):
    """The processor loaded without its video part (see :func:`without_video`)."""
    return without_video(_processor_class(path, traits)).from_pretrained(path, **common)


_WITHOUT_VIDEO: dict[type, type] = {}


def without_video(processor_class: type) -> type:
    """``processor_class`` taking no video processor.

    transformers' ``ProcessorMixin`` reads the ``__init__`` signature to know which
    sub-processors to load, check and save; a subclass whose signature leaves the video
    processor out (it passes None on) loads the image processor and tokenizer only,
    through the class's own ``from_pretrained``. It keeps the class name, so saved
    folders still name the real processor.
    """
    import inspect

    if processor_class in _WITHOUT_VIDEO:
        return _WITHOUT_VIDEO[processor_class]
    named = [p for name, p in list(inspect.signature(processor_class.__init__).parameters.items())[1:]
             if name != "video_processor" and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    # ProcessorMixin.from_args_and_dict reads the accepted names from the code object
    # (co_varnames), not from a signature: the subclass needs a real function with the
    # same named parameters, so it is generated.
    defaults = {p.name: p.default for p in named}
    params = ", ".join(f"{p.name}=_defaults[{p.name!r}]" for p in named)
    passed = ", ".join(f"{p.name}={p.name}" for p in named)
    source = (f"def __init__(self, {params}, **kwargs):\n"
              f"    _parent.__init__(self, {passed}, video_processor=None, **kwargs)\n")
    scope = {"_defaults": defaults, "_parent": processor_class}
    exec(compile(source, f"<{processor_class.__name__} without video>", "exec"), scope)  # noqa: S102
    __init__ = scope["__init__"]
    subclass = type(processor_class.__name__, (processor_class,), {
        "__init__": __init__, "__module__": processor_class.__module__,
        "__doc__": f"{processor_class.__name__} without its video processor (no torchvision)."})
    _WITHOUT_VIDEO[processor_class] = subclass
    return subclass


def dtype_kwarg() -> str:
    """``from_pretrained``'s keyword for the dtype: ``dtype`` on transformers 5, ``torch_dtype`` on 4.x."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return "dtype" if major >= 5 else "torch_dtype"


def auto_model_class(traits: ModelTraits):
    """The transformers auto class for ``traits``.

    Raises:
        ValueError: this transformers has no such auto class (``AutoModelForVision2Seq``
            left transformers 5: remote code naming only it needs transformers 4.x).
    """
    import transformers

    cls = getattr(transformers, traits.auto_class, None)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no {traits.auto_class}, which "
                         "the model's auto_map names")
    return cls


def load_model(path: str, *, attn_implementation: Optional[str] = None, dtype: Any = None,
               trust_remote_code: bool = False, traits: Optional[ModelTraits] = None, **kwargs):
    """The model in ``path`` through its family's auto class (on the CPU, as loaded).

    Args:
        dtype: a torch dtype, ``"auto"`` or None (the class default).
    """
    traits = traits or traits_of(path, trust_remote_code)
    options = {**_common(path, trust_remote_code), **kwargs}
    if attn_implementation:
        options["attn_implementation"] = attn_implementation
    if dtype is not None:
        options[dtype_kwarg()] = dtype
    return auto_model_class(traits).from_pretrained(path, **options)


def build_empty_model(path: str, *, trust_remote_code: bool = False):
    """The model's module tree with no weights (meta tensors): for checks before a launch."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    traits = traits_of(path, trust_remote_code)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    with init_empty_weights():
        return auto_model_class(traits).from_config(config, trust_remote_code=trust_remote_code)


