"""On-disk tensor names against the model's own names, through transformers itself
(:func:`model_names`): a hand-written regex gets transformers 5's load-time renaming wrong,
so the model class is built on the ``meta`` device (no memory, no weights read) and its own
conversion mapping renames each key (docs/weights.md, "Names").
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


@dataclass
class ModelNames:
    """The model's view of a checkpoint's names; every name maps to itself when the class
    could not be built (``error`` says why)."""

    class_name: Optional[str] = None
    expected: dict[str, tuple[int, ...]] = field(default_factory=dict)  # model name -> shape
    #: tied target -> its source (``lm_head.weight`` -> ``...embed_tokens.weight``)
    tied: dict[str, str] = field(default_factory=dict)
    parameters: Optional[int] = None  # tied weights counted once
    optional: list[str] = field(default_factory=list)  # _keys_to_ignore_on_load_missing
    error: Optional[str] = None
    _rename: Optional[Callable[[str], str]] = field(default=None, repr=False)

    def to_model(self, key: str) -> str:
        """The model's name for an on-disk key (the key itself when nothing maps it)."""
        return self._rename(key) if self._rename else key


def model_names(folder: os.PathLike, *, trust_remote_code: bool = False) -> ModelNames:
    """Never raises: a failure is kept in :attr:`ModelNames.error`."""
    try:
        return _model_names(Path(folder), trust_remote_code)
    except Exception as exc:  # any failure of a third-party model class: names as they are
        return ModelNames(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def model_class(config, *, trust_remote_code: bool = False):
    """The class to load ``config`` with: ``architectures[0]`` when transformers has it,
    else an Auto class (transformers is imported here, so that loading timers that start
    after this call do not count the import)."""
    import transformers

    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch and hasattr(transformers, arch):
        return getattr(transformers, arch)
    from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForImageTextToText)

    auto_map = getattr(config, "auto_map", None) or {}
    if trust_remote_code and auto_map:
        for auto in (AutoModelForImageTextToText, AutoModelForCausalLM, AutoModel):
            if auto.__name__ in auto_map:
                return auto
    for auto in (AutoModelForImageTextToText, AutoModelForCausalLM):
        if type(config) in auto._model_mapping:
            return auto
    return AutoModel


@contextlib.contextmanager
def quiet_transformers():
    """transformers' warnings about random initialisation mean nothing on the meta device."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _model_names(folder: Path, trust_remote_code: bool) -> ModelNames:
    import torch
    from transformers import AutoConfig

    with quiet_transformers():
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True,
                                            trust_remote_code=trust_remote_code)
        cls = model_class(config, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            if cls.__name__.startswith("Auto"):
                model = cls.from_config(config, trust_remote_code=trust_remote_code)
            else:
                model = cls._from_config(config)
    state = model.state_dict()
    return ModelNames(
        class_name=type(model).__name__,
        expected={k: tuple(v.shape) for k, v in state.items()},
        tied=_tied(model),
        parameters=sum(p.numel() for p in model.parameters()),
        optional=[str(p) for p in getattr(model, "_keys_to_ignore_on_load_missing", None) or []],
        _rename=_renamer(model, state))


def _tied(model) -> dict[str, str]:
    """Tied target -> source: transformers 5's own table, else parameters sharing an object."""
    table = getattr(model, "all_tied_weights_keys", None)
    if isinstance(table, dict):
        return {str(k): str(v) for k, v in table.items()}
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return {target: names[0] for names in groups.values() for target in names[1:]}


def _renamer(model, state: dict) -> Callable[[str], str]:
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (WeightConverter, WeightRenaming,
                                                     rename_source_key)
    except ImportError:  # transformers 4.x: the class's own regexes
        return _legacy_renamer(model)
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    prefix = model.base_model_prefix

    @functools.cache
    def rename(key: str) -> str:
        return rename_source_key(key, renamings, converters, base_model_prefix=prefix,
                                 meta_state_dict=state)[0]

    return rename


def _legacy_renamer(model) -> Callable[[str], str]:
    """transformers 4.57: the first matching ``_checkpoint_conversion_mapping`` regex."""
    patterns = [(re.compile(p), r) for p, r in
                (getattr(model, "_checkpoint_conversion_mapping", None) or {}).items()]

    @functools.cache
    def rename(key: str) -> str:
        for pattern, replacement in patterns:
            new, hits = pattern.subn(replacement, key)
            if hits:
                return new
        return key

    return rename
