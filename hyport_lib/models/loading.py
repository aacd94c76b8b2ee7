"""Loading any checkpoint the way its family expects. The Qwen-VL family, LLaVA-OneVision,
InternVL, SmolVLM ... ship a video processor that needs torchvision in transformers 5; where
torchvision is missing (the CPU stack hyport tests on has only a CUDA build that does not
import) the processor is built without it (:func:`without_video`). One that cannot work
without torchvision at all (Pixtral's, Llama-4's) is refused in one line. torch and
transformers are imported inside the functions: a launcher can plan without importing either.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hyport_lib.models.families import ModelTraits, describe_config, read_config
from hyport_lib.models.model_cache import SMOLLM2_NAME, transformers_major
from hyport_lib.models.tiny import TINY_MODEL_NAME
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.wording import counted


@dataclass
class LoadedProcessor:
    """A processor (a tokenizer for a text-only model) and what it can do: ``unavailable``
    names each part that could not be loaded, with why; ``prompt_format`` is ``chat`` (its
    chat template) or ``prefix`` (none: the prompt goes in as is, as PaliGemma expects)."""

    processor: Any
    traits: ModelTraits
    unavailable: list[str] = field(default_factory=list)
    prompt_format: str = "chat"

    @property
    def tokenizer(self):
        return tokenizer_of(self.processor)


class ProcessorUnavailable(ValueError):
    """The checkpoint's processor cannot be built (or cannot do what was asked) on this
    stack; the message is one line: the folder or part, what is missing, what to install."""


class VideoSettingUnavailable(AttributeError):
    """A read of a setting of a video processor that was not loaded, which its config does
    not hold either (an AttributeError: ``getattr(..., default)`` and ``hasattr`` work)."""


#: Inside :func:`answering_unset_video_settings`: the value a missing setting reads as, and
#: the names read so far; None outside.
_UNSET_ANSWER: contextvars.ContextVar = contextvars.ContextVar("hyport_unset_video_answer", default=None)


@contextlib.contextmanager
def answering_unset_video_settings(value: Any):
    """Within: a setting the checkpoint lacks reads as ``value`` instead of raising; yields
    the list of the names so read. Only for a caller that proves its result does not
    depend on the value (:func:`hyport_lib.models.prompts.render_messages`)."""
    read: list[str] = []
    token = _UNSET_ANSWER.set((value, read))
    try:
        yield read
    finally:
        _UNSET_ANSWER.reset(token)


class AbsentVideoProcessor:
    """What a processor holds where its video processor would be: not loaded
    (:func:`without_video`), or not in the checkpoint. Not None: processors read their video
    processor's settings outside any video work (SmolVLM's ``apply_chat_template`` reads
    ``num_frames`` and ``fps`` for every conversation). A read answers from the checkpoint's
    video processor config; a setting it lacks is not guessed (the class default lives in a
    module that needs torchvision) but raises, except inside
    :func:`answering_unset_video_settings`.
    """

    def __init__(self, reason: str, settings: Optional[dict] = None):
        self._reason = reason
        self._settings = dict(settings or {})

    def __getattr__(self, name: str):
        # Only reached for names the object lacks; private and dunder names (copy, pickle)
        # are plain misses.
        settings = self.__dict__.get("_settings", {})
        if name.startswith("_"):
            raise AttributeError(name)
        if name in settings:
            return settings[name]
        answering = _UNSET_ANSWER.get()
        if answering is not None:
            value, read = answering
            read.append(name)
            return value
        raise VideoSettingUnavailable(f"video_processor.{name}: the video processor is not loaded "
                                      f"({self.__dict__.get('_reason')}) and the checkpoint's video "
                                      f"processor config does not set {name}")

    def __call__(self, *args, **kwargs):
        raise ProcessorUnavailable(f"videos cannot be processed: the video processor is not loaded "
                                   f"({self._reason})")

    def __repr__(self) -> str:
        return f"AbsentVideoProcessor({self._reason!r}, {len(self._settings)} settings)"


def tokenizer_of(processor):
    return getattr(processor, "tokenizer", processor)


def chat_template_of(processor):
    """The processor's chat template, else its tokenizer's; None when neither has one."""
    return getattr(processor, "chat_template", None) or getattr(tokenizer_of(processor), "chat_template", None)


@functools.lru_cache(maxsize=None)
def torchvision_problem() -> Optional[str]:
    """Why torchvision cannot serve the video processors, or None (one built for another
    torch fails to import: as good as none)."""
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed"
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 — any import failure means no video processors
        return f"torchvision does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return None


def has_torchvision() -> bool:
    return torchvision_problem() is None


def torchvision_hint() -> str:
    """What to install for torchvision: the build made for the torch at hand."""
    import torch

    return (f"install the torchvision built for torch {torch.__version__} (the release paired with "
            "it, from the index this torch came from)")


def wants_video_processor(model_path: Optional[str]) -> tuple[str, Optional[bool]]:
    """``(model type, whether its processor includes a video processor)`` without loading
    anything; the flag is None when it cannot be told (a hub id)."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    text = str(model_path or "").strip()
    if text == TINY_MODEL_NAME:
        model_type = "llava"
    elif text == SMOLLM2_NAME:
        model_type = "llama"
    else:
        try:
            model_type = str(read_config(Path(text).expanduser()).get("model_type") or "")
        except (OSError, ValueError, AttributeError):
            return "", None
    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, str(name), None) if name else None
    if cls is None:
        return model_type, False if model_type else None
    if not (isinstance(cls, type) and issubclass(cls, transformers.ProcessorMixin)):
        # transformers' placeholder for a class whose backend is missing (mistral3's
        # PixtralProcessor without torchvision): its attributes cannot be read.
        return model_type, None
    return model_type, any("video" in a for a in _attribute_names(cls))


def _common(path: str, trust_remote_code: bool) -> dict:
    common: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if Path(path).is_dir():
        common["local_files_only"] = True
    return common


def traits_of(path: str, trust_remote_code: bool = False) -> ModelTraits:
    if Path(path).is_dir():
        return describe_config(read_config(path))
    from transformers import AutoConfig

    return describe_config(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code).to_dict())


def load_processor(path: str, *, trust_remote_code: bool = False) -> LoadedProcessor:
    """The checkpoint's processor, whole where it can be; a load failure that is not the
    missing torchvision raises as transformers raised it."""
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
                _refuse_missing_package(path, exc)
                raise
            processor = _image_side_processor(path, traits, common, exc)
            if isinstance(getattr(processor, "video_processor", None), AbsentVideoProcessor):
                unavailable.append(f"video processor: needs torchvision ({torchvision_problem()}); "
                                   "images are processed, videos are not")
        else:
            if getattr(processor, "video_processor", "absent") is None:
                # Its settings are read for every conversation (SmolVLM): the stand-in
                # answers them from the folder, or refuses, where None would crash. The
                # processor becomes its class without the video part, so that saving it (the
                # worker's final save, the Trainer's checkpoints) leaves the video part out.
                processor.__dict__.pop("video_processor", None)
                processor.__dict__["_hyport_video_settings"] = (_video_settings(Path(path))
                                                                if Path(path).is_dir() else {})
                processor.__dict__["_hyport_video_reason"] = "not in this checkpoint"
                processor.__class__ = without_video(type(processor))
                unavailable.append("video processor: not in this checkpoint")
    _refuse_empty_tokenizer(path, tokenizer_of(processor))
    return LoadedProcessor(processor, traits, unavailable, "chat" if chat_template_of(processor) else "prefix")


#: Fewer tokens than this is no vocabulary: transformers builds a tokenizer of its special
#: tokens alone from a folder without tokenizer files (Qwen2's: one token), which turns
#: every prompt into zero ids.
_SMALLEST_VOCABULARY = 16


def _refuse_empty_tokenizer(path: str, tokenizer) -> None:
    if hasattr(tokenizer, "__len__") and len(tokenizer) < _SMALLEST_VOCABULARY:
        raise ProcessorUnavailable(
            f"{path}: no tokenizer files (tokenizer.json, tokenizer.model or vocab.json); transformers built an "
            f"empty {type(tokenizer).__name__} of {counted(len(tokenizer), 'token')}, which would encode every prompt as "
            "nothing: copy the model's tokenizer files into the folder")


def _refuse_missing_package(path: str, exc: BaseException, processor_class: Optional[type] = None) -> None:
    """ProcessorUnavailable in one line for a processor that needs a package this stack
    lacks, other than torchvision (SmolVLM's needs num2words): an ImportError of its own,
    whatever failed before it."""
    if isinstance(exc, ImportError) and "torchvision" not in str(exc).lower():
        what = processor_class.__name__ if processor_class is not None else "its processor"
        raise ProcessorUnavailable(f"{path}: {what} does not load on this stack: {first_line(exc)[:300]}") from None


def _needs_torchvision(exc: BaseException, *, words=("torchvision", "video")) -> bool:
    seen: Optional[BaseException] = exc
    while seen is not None:
        if any(word in str(seen).lower() for word in words):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _processor_class(path: str, traits: ModelTraits):
    """The processor class the folder names (as AutoProcessor looks), else the model type's;
    without torchvision it may be transformers' placeholder for it."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = None
    for file_name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        config_file = Path(path) / file_name
        if not name and config_file.is_file():
            name = json.loads(config_file.read_text(encoding="utf-8")).get("processor_class")
    name = name or PROCESSOR_MAPPING_NAMES.get(traits.model_type)
    return getattr(transformers, str(name), None) if name else None


def _image_side_processor(path: str, traits: ModelTraits, common: dict, cause: BaseException):
    """The processor loaded without its video part, or ProcessorUnavailable when even that
    needs torchvision."""
    problem = torchvision_problem()
    processor_class = _processor_class(path, traits)
    if processor_class is None:
        raise ProcessorUnavailable(f"{path}: its processor needs torchvision ({problem}) and hyport knows "
                                   f"no processor class to build without it ({first_line(cause)[:200]}); "
                                   f"{torchvision_hint()}")
    try:
        subclass = without_video(processor_class)
    except ProcessorUnavailable as exc:
        raise ProcessorUnavailable(f"{path}: {exc}") from None
    try:
        return subclass.from_pretrained(path, **common)
    except (ImportError, AttributeError, ValueError, TypeError, OSError) as exc:
        # Its own message first: the torchvision error that led here is in its context.
        _refuse_missing_package(path, exc, processor_class)
        if not _needs_torchvision(exc, words=("torchvision",)):
            raise
        raise ProcessorUnavailable(f"{path}: {processor_class.__name__} needs torchvision ({problem}) "
                                   f"even without its video part: {first_line(exc)[:200]}; "
                                   f"{torchvision_hint()}") from None


_WITHOUT_VIDEO: dict[type, type] = {}


def without_video(processor_class: type) -> type:
    """``processor_class`` taking no video processor (the class itself when it has none);
    ProcessorUnavailable for transformers' placeholder of a class whose backend is missing
    (PixtralProcessor without torchvision).

    transformers decides which sub-processors a processor loads, checks and saves from its
    attribute list (5.x: ``get_attributes()``, read from the ``__init__`` signature; 4.x:
    ``attributes``). The subclass lists them without the video ones but keeps the class's
    own ``__init__`` (``from_pretrained`` reads its parameter names), and drops the video
    argument between that ``__init__`` and ``ProcessorMixin.__init__`` (a base the method
    resolution order puts there), before transformers checks its type: a None video
    processor fails that check, and without torchvision the check's base class is absent.
    It keeps the class name, so saved folders still name the real processor.
    """
    from transformers import ProcessorMixin

    if processor_class in _WITHOUT_VIDEO:
        return _WITHOUT_VIDEO[processor_class]
    if not (isinstance(processor_class, type) and issubclass(processor_class, ProcessorMixin)):
        backends = ", ".join(getattr(processor_class, "_backends", None) or ["a missing library"])
        name = getattr(processor_class, "__name__", str(processor_class))
        why = f" ({torchvision_problem()}); {torchvision_hint()}" if "torchvision" in backends else ""
        raise ProcessorUnavailable(f"its processor {name} cannot be built without {backends}{why}")
    attributes = _attribute_names(processor_class)
    dropped = tuple(name for name in attributes if "video" in name)
    if not dropped:
        return processor_class
    kept = [name for name in attributes if name not in dropped]

    def get_attributes(cls):
        return list(kept)

    def from_args_and_dict(cls, args, processor_dict, **kwargs):
        # transformers loaded the sub-processors in the order of the kept attributes; the
        # class's __init__ takes them positionally in its full order.
        loaded = dict(zip(kept, args))
        rest = {key: value for key, value in processor_dict.items() if key not in dropped}
        return super(subclass, cls).from_args_and_dict([loaded.get(name) for name in attributes], rest,
                                                       **kwargs)

    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        folder = Path(pretrained_model_name_or_path) / (kwargs.get("subfolder") or "")
        # Known while the class's own __init__ runs: some read their video processor's
        # settings there (MiniCPM-V 4.6's slice_mode), not only later.
        token = _LOADING_VIDEO_SETTINGS.set(_video_settings(folder))
        try:
            return super(subclass, cls).from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        finally:
            _LOADING_VIDEO_SETTINGS.reset(token)

    def absent(self):
        problem = torchvision_problem()
        reason = self.__dict__.get("_hyport_video_reason") or (
            f"it needs torchvision, and {problem}" if problem else "left out by hyport")
        return AbsentVideoProcessor(reason, self.__dict__.get("_hyport_video_settings"))

    namespace: dict[str, Any] = {
        "__module__": processor_class.__module__, "__qualname__": processor_class.__qualname__,
        "__doc__": f"{processor_class.__name__} without its video processor (no torchvision).",
        "_hyport_all_attributes": tuple(attributes), "_hyport_dropped": dropped,
        "get_attributes": classmethod(get_attributes), "attributes": list(kept),
        "from_args_and_dict": classmethod(from_args_and_dict),
        "from_pretrained": classmethod(from_pretrained),
        **{name: property(absent) for name in dropped},
    }
    subclass = type(processor_class.__name__, (processor_class, _video_dropping_base()), namespace)
    _WITHOUT_VIDEO[processor_class] = subclass
    return subclass


def _attribute_names(processor_class: type) -> list[str]:
    if callable(getattr(processor_class, "get_attributes", None)):
        return list(processor_class.get_attributes())
    return list(getattr(processor_class, "attributes", []))


@functools.lru_cache(maxsize=None)
def _video_dropping_base() -> type:
    """The base :func:`without_video` puts before ``ProcessorMixin``: what the class's
    ``__init__`` hands to ``super().__init__`` positionally goes on by name, the video
    processors left out."""
    from transformers import ProcessorMixin

    def __init__(self, *args, **kwargs):
        self.__dict__["_hyport_video_settings"] = _LOADING_VIDEO_SETTINGS.get()
        for name, value in zip(type(self)._hyport_all_attributes, args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}: got multiple values for {name}")
            kwargs[name] = value
        for name in type(self)._hyport_dropped:
            kwargs.pop(name, None)
        ProcessorMixin.__init__(self, **kwargs)

    return type("VideoDroppingProcessorMixin", (ProcessorMixin,), {
        "__init__": __init__, "__module__": __name__,
        "__doc__": "Drops the video processor arguments on their way to ProcessorMixin."})


#: The video settings of the folder a :func:`without_video` class is loading from.
_LOADING_VIDEO_SETTINGS: contextvars.ContextVar = contextvars.ContextVar("hyport_video_settings", default={})


def _video_settings(folder: Path) -> dict:
    """The settings a video processor would be built with: its config, plus what its class
    would derive (SmolVLM's ``num_frames`` and ``fps`` from the ``video_sampling`` block)."""
    settings = dict(_video_config(folder))
    sampling = settings.get("video_sampling")
    for setting, source in (("num_frames", "max_frames"), ("fps", "fps")):
        if isinstance(sampling, dict) and source in sampling:
            settings.setdefault(setting, sampling[source])
    return settings


def _video_config(folder: Path) -> dict:
    """The config a video processor would be built from in ``folder``, found as this
    transformers finds it; empty for a hub id."""
    if not os.path.isdir(folder):
        return {}

    def read(name: str) -> Optional[dict]:
        path = folder / name
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    if transformers_major() >= 5:
        nested = (read("processor_config.json") or {}).get("video_processor")
        if isinstance(nested, dict):
            return nested
        return read("video_preprocessor_config.json") or read("preprocessor_config.json") or {}
    for name in ("video_preprocessor_config.json", "preprocessor_config.json", "processor_config.json"):
        data = read(name)
        if data is not None:
            nested = data.get("video_processor", data)
            return nested if isinstance(nested, dict) else {}
    return {}


def dtype_kwarg() -> str:
    return "dtype" if transformers_major() >= 5 else "torch_dtype"


def auto_model_class(traits: ModelTraits):
    """ValueError where this transformers lacks the class (``AutoModelForVision2Seq`` left 5.x)."""
    import transformers

    cls = getattr(transformers, traits.auto_class, None)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no {traits.auto_class}, which "
                         "the model's auto_map names")
    return cls


def load_model(path: str, *, attn_implementation: Optional[str] = None, dtype: Any = None,
               trust_remote_code: bool = False, traits: Optional[ModelTraits] = None, **kwargs):
    """The model through its family's auto class, on the CPU; ``dtype``: a torch dtype,
    ``"auto"`` or None (the class default)."""
    traits = traits or traits_of(path, trust_remote_code)
    options = {**_common(path, trust_remote_code), **kwargs}
    if attn_implementation:
        options["attn_implementation"] = attn_implementation
    if dtype is not None:
        options[dtype_kwarg()] = dtype
    return auto_model_class(traits).from_pretrained(path, **options)


def build_empty_model(path: str, *, trust_remote_code: bool = False):
    """The model's module tree on meta tensors, for checks before a launch; tied as a loaded
    model is (``from_config`` leaves them apart), so a tied embedding is counted once."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    traits = traits_of(path, trust_remote_code)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    with init_empty_weights():
        model = auto_model_class(traits).from_config(config, trust_remote_code=trust_remote_code)
    model.tie_weights()
    return model


