"""The parameters of a report run: profile + ``-p``, checked once before anything runs.

Every key must be one that some notebook declares (a typo such as ``num_card`` is an
error naming the closest known key; ``allow_unknown=True`` accepts it and the index
lists it as ignored), every value must be what the parameter accepts
(:func:`hyport_lib.parameters.validate_parameters`), and renamed keys are moved to their
new names with a deprecation message. ``-p`` values stay text for text parameters and
are parsed as YAML otherwise; relative paths are made absolute against the caller's
working directory, because each notebook runs in its own folder.
"""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from hyport_lib.models.preflight import _HUB_ID
from hyport_lib.parameters import ParameterError, kind_of_default, rename_keys, validate_parameters
from hyport_lib.stages import Stage
from hyport_lib.utils.redact import is_secret_parameter, scrub_text

# Parameters whose string values are paths: made absolute against the caller's cwd,
# because the notebooks run with their own folder as working directory.
_PATH_SUFFIXES = ("_path", "_dir", "_file")
_PATH_KEYS = ("image", "image_root", "deepspeed_config", "resume_from")
#: Values that name something other than a file where a path may stand.
_NOT_PATHS = {"model_path": ("tiny",), "resume_from": ("auto", "none")}


def is_path_key(key: str) -> bool:
    """A parameter whose text values are file or folder paths."""
    return key.endswith(_PATH_SUFFIXES) or key in _PATH_KEYS


def notebook_defaults(stage: Stage) -> dict[str, Any]:
    """Parameter names of the notebook's ``parameters`` cell -> their default values.

    papermill's own inspection finds the names (the same parser that injects values);
    the defaults are the literals written there.
    """
    import papermill

    specs = papermill.inspect_notebook(str(stage.path))
    defaults = {}
    for name, spec in specs.items():
        try:
            defaults[name] = ast.literal_eval(spec.get("default") or "None")
        except (ValueError, SyntaxError):
            defaults[name] = None
    return defaults


def notebook_parameters(stage: Stage) -> dict[str, str]:
    """Parameter names -> the kind of their default (``str``, ``int``, ``None``, ...)."""
    return {name: kind_of_default(value) or "None" for name, value in notebook_defaults(stage).items()}


def coerce_overrides(raw: dict, types: dict[str, str]) -> dict:
    """``-p`` values: kept as typed text for string parameters, parsed as YAML otherwise.

    A prompt such as ``Translate: hello`` or ``yes`` must reach a string parameter as
    written, while ``num_cards=4`` or ``allow_busy_cards=true`` need their YAML types.
    """
    from hyport_lib.report.profiles import parse_yaml_value

    # Paths stay text too (a folder named 2024 is no number), but YAML's null still
    # means None: the way to undo a profile's output_dir.
    def path_value(value):
        return None if isinstance(value, str) and value.strip() in ("null", "~", "Null", "NULL") else value

    return {key: path_value(value) if is_path_key(key)
            else value if types.get(key) == "str" or not isinstance(value, str)
            else parse_yaml_value(key, value) for key, value in raw.items()}


def absolutize_paths(params: dict, base: Path) -> dict:
    """Relative paths made absolute against ``base`` (the caller's working directory).

    Every path parameter (:func:`is_path_key`) is resolved there, existing or not, so
    that a missing file is named where the user looked for it, not in the notebook's
    folder; only what names no file stays as written: ``model_path`` ``tiny`` or a hub
    id that is no folder here, ``resume_from`` ``auto`` / ``none``.
    """
    out = {}
    for key, value in params.items():
        if isinstance(value, str) and value.startswith("~") and is_path_key(key):
            value = os.path.expanduser(value)
        if isinstance(value, str) and value and not os.path.isabs(value) and is_path_key(key) \
                and value.strip().lower() not in _NOT_PATHS.get(key, ()) \
                and not (key == "model_path" and _HUB_ID.match(value) and not (base / value).exists()):
            value = str((base / value).resolve())
        out[key] = value
    return out


def safe_parameters(params: dict) -> dict:
    """Parameters fit to print: secret-named keys dropped, values scrubbed."""
    return {k: (scrub_text(v) if isinstance(v, str) else v)
            for k, v in params.items() if not is_secret_parameter(k)}


@dataclass
class RunParameters:
    merged: dict  # every parameter of the run, checked and typed
    declared: dict[str, dict[str, Any]]  # stage id -> its notebook's defaults
    unused: list[str]  # keys no notebook declares (only with allow_unknown)

    def for_stage(self, stage: Stage) -> dict:
        return {k: v for k, v in self.merged.items() if k in self.declared[stage.id]}


def resolve_parameters(from_profile: dict, overrides: dict, stages: list[Stage], *,
                       profile_name: str = "the profile", allow_unknown: bool = False,
                       say: Optional[Callable[[str], None]] = None, base: Optional[Path] = None
                       ) -> RunParameters:
    """Merge, rename, type, check and absolutize (see the module docstring).

    Raises:
        ParameterError: unknown keys (with the closest known ones) or bad values.
    """
    from_profile = rename_keys(from_profile, say)
    overrides = rename_keys(overrides, say)
    declared = {s.id: notebook_defaults(s) for s in stages}
    defaults: dict[str, Any] = {}
    for stage_defaults in declared.values():
        for key, value in stage_defaults.items():
            defaults.setdefault(key, value)
    types = {k: kind_of_default(v) or "None" for k, v in defaults.items()}
    problems = []
    for source, keys in ((profile_name, from_profile), ("-p", overrides)):
        for key in sorted(k for k in keys if k not in defaults):
            if allow_unknown and (source != "-p" or key in from_profile):
                continue
            near = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            problems.append(f"{source}: unknown parameter {key!r} (no notebook declares it){hint}")
    if problems:
        raise ParameterError(problems)
    merged = {**from_profile, **coerce_overrides(overrides, types)}
    merged = validate_parameters(merged, defaults)
    merged = absolutize_paths(merged, base or Path.cwd())
    return RunParameters(merged, declared, sorted(k for k in merged if k not in defaults))


#: Folders stage 05 reads: they must exist before the run starts, unless the training
#: stage of the same run writes them (its output_dir holds the final weights and the
#: checkpoint-N folders; the model before fine-tuning, base_path, it never writes).
INPUT_PATHS = ("weights_path", "base_path", "checkpoint_path")
_WRITTEN_BY_TRAINING = ("weights_path", "checkpoint_path")


def check_input_paths(params: RunParameters, selected: list[Stage]) -> None:
    """Refuse, before any stage runs, a path parameter that names nothing.

    Raises:
        ParameterError: each such key with its (absolute) value.
    """
    wanted = {k for s in selected for k in params.declared.get(s.id, {})}
    trains = any(s.name == "train" for s in selected)
    # Without an output_dir the training stage writes into a folder of the new run, which
    # no path given now can name.
    out = params.merged.get("output_dir") if trains else None
    problems = []
    for key in INPUT_PATHS:
        value = params.merged.get(key)
        if key not in wanted or not isinstance(value, str) or not value:
            continue
        path = Path(value).expanduser()
        if path.exists():
            continue
        if out and key in _WRITTEN_BY_TRAINING and _inside(path, Path(out).expanduser()):
            continue
        problems.append(f"{key}={value!r}: no such file or folder"
                        + (f" (and not inside output_dir={out!r}, which stage 04 writes)"
                           if out and key in _WRITTEN_BY_TRAINING else ""))
    if problems:
        raise ParameterError(problems)


def check_stage_parameters(params: RunParameters, selected: list[Stage]) -> None:
    """Each selected stage's own check of its parameters (``check_parameters(params)`` in
    its ``stage.py``, where it has one: the same checks its stage function makes first),
    so that a value the stage would refuse stops the run before anything is written.

    Raises:
        ParameterError: each stage's complaint, naming the stage.
    """
    from hyport_lib.stages import stage_module

    problems = []
    for stage in selected:
        module = stage_module(stage.id)
        check = getattr(module, "check_parameters", None)
        if check is None:
            continue
        try:
            check(params.for_stage(stage))
        except ValueError as exc:
            problems.append(f"{stage.id}: {exc}")
    if problems:
        raise ParameterError(problems)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


__all__ = ["INPUT_PATHS", "ParameterError", "RunParameters", "absolutize_paths", "check_input_paths",
           "check_stage_parameters",
           "coerce_overrides",
           "notebook_defaults", "notebook_parameters", "resolve_parameters", "safe_parameters"]
