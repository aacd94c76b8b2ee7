"""Rules for parameter names, and the names that changed.

**The rule.** A parameter shared by several stages has a plain name: ``device``,
``num_cards``, ``model_path``, ``dtype``, ``attn_implementation``,
``trust_remote_code``. A parameter of one stage is plain too, unless the same word
would mean something else in another stage; then it carries the stage's prefix
(``timeout_s`` meant only the inference limit, so it is ``infer_timeout_s``). Names
users already type stay as they are (``max_steps``, ``save_steps``: the seed's training
script reads ``MAX_STEPS`` / ``SAVE_STEPS``). Profiles, ``-p`` and the notebooks'
``parameters`` cells all use the same names.

**Renames.** An old name keeps working for one release: profiles and ``-p`` values are
moved to the new name with a deprecation message, and a notebook that still receives
the old name (papermill ``-p``) resolves it with :func:`renamed`.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Optional

#: old name -> new name (accepted for one release, with a deprecation message).
RENAMED = {"timeout_s": "infer_timeout_s"}


def deprecation_message(old: str, new: str) -> str:
    return f"parameter {old!r} is deprecated: use {new!r} (the old name is accepted for one release)"


def rename_keys(params: dict, say: Optional[Callable[[str], None]] = None) -> dict:
    """``params`` with every old name of :data:`RENAMED` moved to its new name.

    Args:
        params: parameter name -> value.
        say: where the deprecation message goes (default: a ``DeprecationWarning``).

    Raises:
        ValueError: both the old and the new name are given with different values.
    """
    out = dict(params)
    for old, new in RENAMED.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            raise ValueError(f"{old}={value!r} and {new}={out[new]!r}: give only {new!r} "
                             f"({old!r} is its deprecated name)")
        out[new] = value
        _say(deprecation_message(old, new), say)
    return out


def renamed(old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """In a notebook: the value of ``new``, taken from ``old`` when only that was set.

    The notebook's ``parameters`` cell holds ``old = None``; papermill sets it when a
    user still passes the old name, and this returns it with a deprecation warning.
    """
    if old_value is None:
        return new_value
    _say(deprecation_message(old, new), None)
    return old_value


def _say(message: str, say: Optional[Callable[[str], None]]) -> None:
    if say is not None:
        say(message)
    else:
        warnings.warn(message, DeprecationWarning, stacklevel=3)


# --------------------------------------------------------------------------- validation
class ParameterError(ValueError):
    """One or more parameters are wrong; ``details`` has a line per problem."""

    def __init__(self, problems: list[str]):
        # One problem is said in the message alone; several are listed under it.
        self.details = list(problems) if len(problems) > 1 else []
        first = problems[0] if len(problems) == 1 else f"{len(problems)} parameters are wrong: {problems[0]}"
        super().__init__(first)


#: What the shared (and a few stage) parameters accept, where the notebooks' default
#: (often None) says too little. kind: int, float, bool, str, choice, list.
SCHEMA: dict[str, dict] = {
    "device": {"kind": "choice", "choices": ("auto", "npu", "cuda", "cpu")},
    "num_cards": {"kind": "int", "min": 1, "optional": True},
    "model_path": {"kind": "str", "nonempty": True},
    "dtype": {"kind": "choice", "choices": ("auto", "float32", "bfloat16", "float16")},
    "attn_implementation": {"kind": "str", "nonempty": True},
    "trust_remote_code": {"kind": "bool"},
    "infer_timeout_s": {"kind": "float", "min_exclusive": 0},
    "train_timeout_s": {"kind": "float", "min_exclusive": 0},
    "max_new_tokens": {"kind": "int", "min": 1},
    "max_steps": {"kind": "int", "min": 1, "optional": True},
    "save_steps": {"kind": "int", "min": 1},
    "zero_stage": {"kind": "choice", "choices": (0, 2, 3)},
    "precision": {"kind": "choice", "choices": ("auto", "bf16", "fp16", "fp32")},
    "finetuning_type": {"kind": "choice", "choices": ("full", "lora")},
    "ram_gb_per_card": {"kind": "float", "min_exclusive": 0, "optional": True},
    "shm_gb_per_card": {"kind": "float", "min_exclusive": 0, "optional": True},
    "max_shard_size": {"kind": "str", "optional": True},
    "per_device_train_batch_size": {"kind": "int", "min": 1},
    "gradient_accumulation_steps": {"kind": "int", "min": 1},
    "nnodes": {"kind": "int", "min": 1},
    "node_rank": {"kind": "int", "min": 0},
    "master_port": {"kind": "int", "min": 0, "max": 65535},
    "max_restarts": {"kind": "int", "min": 0},
    "seed": {"kind": "int", "min": 0},
    "max_seq_len": {"kind": "int", "min": 16},
    "learning_rate": {"kind": "float", "min_exclusive": 0},
    "image": {"kind": "file", "optional": True},
    "warmup_runs": {"kind": "int", "min": 0},
    "skip_not_applicable": {"kind": "bool"},
    "checksum": {"kind": "choice", "choices": ("crc32", "sha256")},
    "reload_timeout_s": {"kind": "float", "min_exclusive": 0},
    "weights_path": {"kind": "str", "nonempty": True, "optional": True},
    "base_path": {"kind": "str", "nonempty": True, "optional": True},
    "checkpoint_path": {"kind": "str", "nonempty": True, "optional": True},
}


def kind_of_default(value: Any) -> Optional[str]:
    """The kind a notebook's default implies (None: it says nothing, e.g. a None default)."""
    if isinstance(value, bool):
        return "bool"
    for kind, types in (("int", int), ("float", float), ("str", str), ("list", (list, tuple)),
                        ("dict", dict)):
        if isinstance(value, types):
            return kind
    return None


def check_value(key: str, value: Any, spec: dict) -> tuple[Any, Optional[str]]:
    """``(value as the stage wants it, None)`` or ``(value, why it is wrong)``."""
    import math

    from hyport_lib.utils.values import as_flag, as_float, as_int

    kind = spec.get("kind")
    if value is None:
        ok = spec.get("optional", kind is None)
        return value, None if ok else f"{key}=None: a value is required ({_accepted(spec)})"
    try:
        if kind == "int":
            value = as_int(key, value)
        elif kind == "float":
            value = as_float(key, value)
        elif kind == "bool":
            value = as_flag(key, value)
        elif kind == "choice":
            matches = [c for c in spec["choices"] if c == value or str(c) == str(value)]
            if not matches or isinstance(value, bool):
                raise ValueError(f"{key}={value!r}")
            value = matches[0]
        elif kind == "str":
            if not isinstance(value, str):
                raise ValueError(f"{key}={value!r}")
            if spec.get("nonempty") and not value.strip():
                raise ValueError(f"{key}={value!r}")
        elif kind == "list" and not isinstance(value, (list, tuple)):
            raise ValueError(f"{key}={value!r}")
        elif kind == "file":
            if not isinstance(value, str) or not os.path.isfile(os.path.expanduser(value)):
                return value, f"{key}={value!r}: no such file"
    except ValueError:
        return value, f"{key}={value!r}: expected {_accepted(spec)}"
    if kind in ("int", "float"):
        if kind == "float" and not math.isfinite(value):
            return value, f"{key}={value!r}: expected a finite number"
        if "min" in spec and value < spec["min"] or "max" in spec and value > spec["max"]:
            return value, f"{key}={value!r}: expected {_accepted(spec)}"
        if "min_exclusive" in spec and value <= spec["min_exclusive"]:
            return value, f"{key}={value!r}: expected {_accepted(spec)}"
    return value, None


def _accepted(spec: dict) -> str:
    kind = spec.get("kind")
    if kind == "choice":
        text = "one of " + ", ".join(map(repr, spec["choices"]))
    elif kind == "int":
        text = "an integer" + (f" >= {spec['min']}" if "min" in spec else "") + (
            f" and <= {spec['max']}" if "max" in spec else "")
    elif kind == "float":
        text = "a number" + (f" > {spec['min_exclusive']}" if "min_exclusive" in spec else "")
    elif kind == "bool":
        text = "true or false"
    elif kind == "str":
        text = "a non-empty text" if spec.get("nonempty") else "a text"
    else:
        text = f"a {kind}"
    return text + (" (or null)" if spec.get("optional") else "")


def validate_parameters(params: dict, defaults: dict[str, Any]) -> dict:
    """Every parameter checked against :data:`SCHEMA` or the kind of its notebook default.

    Args:
        params: name -> value (from a profile and ``-p``).
        defaults: name -> a notebook's default value, for the names no schema covers.

    Returns:
        The values as the stages want them (``"4"`` -> 4 for an integer parameter).

    Raises:
        ParameterError: naming each key, its value and what it accepts.
    """
    out, problems = {}, []
    for key, value in params.items():
        spec = SCHEMA.get(key) or {"kind": kind_of_default(defaults.get(key)),
                                   "optional": defaults.get(key) is None}
        if spec["kind"] == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if spec["kind"] is None:
            out[key] = value
            continue
        out[key], problem = check_value(key, value, spec)
        if problem:
            problems.append(problem)
    if problems:
        raise ParameterError(problems)
    return out
