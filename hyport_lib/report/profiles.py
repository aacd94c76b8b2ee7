"""Parameter profiles (YAML) and ``-p key=value`` overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import yaml

import hyport_lib


def default_profiles_dir() -> Path:
    return Path(hyport_lib.__file__).resolve().parents[1] / "parameters"


def resolve_profile(name_or_path: Optional[str]) -> Optional[Path]:
    """``default`` / ``ascend-910b-8card`` (a file in parameters/) or a path; None = no profile."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = default_profiles_dir() / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    if path.is_file():  # a profile under another suffix: read as YAML, errors name the file
        return path
    known = ", ".join(sorted(p.stem for p in default_profiles_dir().glob("*.yaml")))
    raise FileNotFoundError(f"profile {name_or_path!r} not found (as a file or in parameters/: {known})")


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice (YAML would keep the last silently:
    ``device: cpu`` then ``device: npu`` must not quietly mean npu)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base": what it brings in may be overridden here
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
            try:
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                pass
        return super().construct_mapping(node, deep=deep)


def load_profile(path: Optional[Path]) -> dict:
    """Read a profile; errors name the file."""
    if path is None:
        return {}
    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_StrictLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read profile ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a mapping of parameter: value, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ValueError(f"{path}: parameter names must be identifiers, got {bad}")
    return data


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["max_steps=20", "device=cpu"]`` -> ``{"max_steps": "20", ...}``, values as text.

    Typing happens later (:func:`hyport_lib.report.run_parameters.coerce_overrides`), by the
    type each stage's ``Params`` declares.
    """
    result = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"-p {item!r}: expected key=value with an identifier key")
        result[key] = raw
    return result


def parse_yaml_value(key: str, raw: str):
    """A ``-p`` value for a non-string parameter, parsed as YAML (``20``, ``true``, ``[1, 2]``)."""
    if not raw.strip():
        return None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"-p {key}={raw!r}: value is not valid YAML ({exc})") from exc
