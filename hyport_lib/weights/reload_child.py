"""The reload's child (:func:`hyport_lib.weights.reload.reload`): ``from_pretrained`` in a fresh
interpreter, with the ``attn_implementation`` asked for. A hyport attention name is
registered with transformers here first, as stage 03 and stage 04's workers do: a fresh
process knows only transformers' own names. This module imports torch; only the child
imports it (plans stay free of torch).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from hyport_lib.models.loading import dtype_kwarg, load_processor
from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.npu_attention.names import BACKEND_OF_NAME, backend_of
from hyport_lib.weights.names import model_class
from hyport_lib.weights.reload import TOKENIZER_FILES

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def reload_in_child(spec: dict) -> dict:
    """The loaded model's figures (what :class:`~hyport_lib.weights.reload.ReloadResult` takes)."""
    import transformers
    from transformers import AutoConfig

    path, trust = spec["path"], bool(spec.get("trust_remote_code"))
    name = spec["attn_implementation"]
    if name in BACKEND_OF_NAME:  # a name is not a kernel: this process registers it
        register_hyport_attention(backend_of(name), name)
    common = {"local_files_only": True, "trust_remote_code": trust}
    config = AutoConfig.from_pretrained(path, **common)
    cls = model_class(config, trust_remote_code=trust)  # imported before the timer starts
    dtype = "auto" if spec["dtype"] == "auto" else getattr(torch, spec["dtype"])
    started = time.perf_counter()
    model, info = cls.from_pretrained(path, attn_implementation=spec["attn_implementation"],
                                      output_loading_info=True, **{dtype_kwarg(): dtype}, **common)
    load_s = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.parameters())
    print("LOAD_OK", model.config.model_type, parameters, flush=True)
    processor, processor_error = _processor(Path(path), common)
    arch = (getattr(config, "architectures", None) or [None])[0]
    fallback = (f"config.json names {arch}, which transformers {transformers.__version__} does "
                f"not have: loaded {type(model).__name__} through {cls.__name__} from model_type "
                f"{config.model_type!r} instead" if arch and arch != type(model).__name__
                and not getattr(config, "auto_map", None) else None)
    return {
        "class_fallback": fallback,
        "model_type": model.config.model_type, "model_class": type(model).__name__,
        "parameters": int(parameters), "loaded_dtype": str(next(model.parameters()).dtype),
        "load_s": round(load_s, 3),
        "missing_keys": sorted(map(str, info.get("missing_keys") or ())),
        "unexpected_keys": sorted(map(str, info.get("unexpected_keys") or ())),
        "mismatched_keys": sorted(map(str, info.get("mismatched_keys") or ())),
        "processor": processor, "processor_error": processor_error,
    }


def _processor(folder: Path, common: dict) -> tuple[Optional[str], Optional[str]]:
    """The processor (or tokenizer) where the folder has its files, loaded as the stages
    load it."""
    if not any((folder / f).is_file() for f in PROCESSOR_FILES + TOKENIZER_FILES):
        return None, None
    try:
        loaded = load_processor(str(folder), trust_remote_code=common["trust_remote_code"])
    except Exception as exc:  # reported as a finding, the model's result stands
        return None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    name = type(loaded.processor).__name__
    return (f"{name} ({'; '.join(loaded.unavailable)})" if loaded.unavailable else name), None
