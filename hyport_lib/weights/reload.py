"""The seed's reload check, in a fresh process (:mod:`.runner`): ``LOAD_OK <model_type>
<parameters>``, as the seed printed after ``from_pretrained`` of its model and processor.

:func:`reload` loads the class from ``config.json`` (``local_files_only``, remote code only
when asked) with ``output_loading_info=True``: a *missing* key loads without any error and
leaves that weight random, so missing, unexpected and mismatched keys are findings. On
failure the log's tail is kept (transformers logs its "LOAD REPORT" table there).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.models.loading import dtype_kwarg, load_processor
from hyport_lib.weights.names import model_class
from hyport_lib.weights.runner import ChildRun, run_task

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class ReloadResult(ChildRun):
    """The reload of one folder; ``status``: LOAD_OK, failed or timeout."""

    path: str
    status: str
    dtype: str
    attn_implementation: str
    trust_remote_code: bool
    local_files_only: bool = True
    model_type: Optional[str] = None
    model_class: Optional[str] = None
    parameters: Optional[int] = None
    loaded_dtype: Optional[str] = None
    load_s: Optional[float] = None
    peak_rss_bytes: Optional[int] = None
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    mismatched_keys: list[str] = field(default_factory=list)
    processor: Optional[str] = None
    processor_error: Optional[str] = None
    #: how the class was chosen when architectures names none this transformers has
    class_fallback: Optional[str] = None

    @property
    def load_ok(self) -> bool:
        return self.status == "LOAD_OK"

    @property
    def line(self) -> str:
        """The seed's line: ``LOAD_OK llava 210752``, or why not."""
        if self.load_ok:
            return f"LOAD_OK {self.model_type} {self.parameters}"
        return f"{self.status.upper()}: {self.reason}"

    def to_dict(self) -> dict:
        return {**asdict(self), "load_ok": self.load_ok, "line": self.line}


def reload(path: os.PathLike, *, dtype: str = "bfloat16", attn_implementation: str = "eager",
           trust_remote_code: bool = False, timeout_s: float = 600.0,
           log_dir: Optional[os.PathLike] = None) -> ReloadResult:
    """Load ``path`` in a fresh process as the seed did; never raises for the model's sake.

    Raises:
        FileNotFoundError: ``path`` is not a folder.
    """
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"reload path {str(path)!r}: not a folder (from_pretrained needs one)")
    spec = {"path": str(folder), "dtype": dtype, "attn_implementation": attn_implementation,
            "trust_remote_code": bool(trust_remote_code)}
    out = run_task("reload", spec, timeout_s=timeout_s, log_dir=log_dir, name="reload")
    return ReloadResult.from_outcome(
        out, str(folder), "LOAD_OK" if out.status == "ok" else out.status, dtype, attn_implementation,
        bool(trust_remote_code), peak_rss_bytes=out.result.get("peak_rss_bytes"), taken=(
            "model_type", "model_class", "parameters", "loaded_dtype", "load_s", "missing_keys",
            "unexpected_keys", "mismatched_keys", "processor", "processor_error", "class_fallback"))


def reload_findings(result: ReloadResult) -> list[Finding]:
    """What a reload says about the checkpoint."""
    here = Path(result.path).name
    out = []
    if not result.load_ok:
        out.append(Finding("reload_failed", here, f"from_pretrained in a fresh process: {result.reason}"))
        return out
    for cls, keys, why in (
            ("reload_missing_keys", result.missing_keys, "are missing: the model initialised them randomly"),
            ("reload_mismatched_keys", result.mismatched_keys, "have another shape than the model expects"),
            ("reload_unexpected_keys", result.unexpected_keys, "are not used by the model")):
        if keys:
            out.append(Finding(cls, here, f"{len(keys)} weight(s) {why}: {name_some(keys)}", tensors=keys))
    if result.class_fallback:
        out.append(Finding("reload_class_fallback", here, result.class_fallback))
    if result.processor_error:
        out.append(Finding("processor_failed", here, f"the processor/tokenizer files do not load: "
                                                     f"{result.processor_error}"))
    return out


# --------------------------------------------------------------------------- child side
def reload_in_child(spec: dict) -> dict:
    """In the worker: load the model and its processor; the result fields."""
    import torch
    from transformers import AutoConfig

    path, trust = spec["path"], bool(spec.get("trust_remote_code"))
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
    import transformers

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
    """Load the processor (or tokenizer) where the folder has its files, as the stages do
    (:func:`hyport_lib.models.loading.load_processor`)."""
    if not any((folder / f).is_file() for f in PROCESSOR_FILES + TOKENIZER_FILES):
        return None, None
    try:
        loaded = load_processor(str(folder), trust_remote_code=common["trust_remote_code"])
    except Exception as exc:  # reported as a finding, the model's result stands
        return None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    name = type(loaded.processor).__name__
    return (f"{name} ({'; '.join(loaded.unavailable)})" if loaded.unavailable else name), None
