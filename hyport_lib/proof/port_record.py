"""What the port's proof records, which files of a tree it imports, and what it says when
the tiny model cannot be built, with no torch: ``hyport port`` without ``--proof`` and the
parent of a proof run should not pay for importing torch (seconds and ~240 MB).

Remote code often reads config fields its config class does not default, or in an older
shape (InternLM2's ``config.rope_scaling['type']``, which transformers 5 fills in as
``{"rope_type": ...}``): the build fails with a bare ``KeyError: 'type'``, and the failing
line says which field the one setting that fixes it needs (:func:`config_fix`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.scan.rules import GENERATED_MODULE

#: What the proof is doing, as told to ``on_phase`` (a child that dies says when it did).
IMPORT_ORIGINAL = "import of the original code (SRC)"
RUN_ORIGINAL = "the original model's build and forward"
IMPORT_PORTED = "import of the ported code (DST)"
RUN_PORTED = "the ported model's build and forward"
#: Where the failing line says which field but not its value.
UNKNOWN = "<value>"
#: The values real checkpoints set for fields that remote code reads key by key
#: (InternLM2, and the Llama-derived code written before transformers 4.45 renamed
#: ``type`` to ``rope_type``).
TYPICAL = {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
_NO_ATTRIBUTE = re.compile(r"has no attribute '(\w+)'")


@dataclass
class ProofCase:
    name: str
    kind: str
    verdict: str
    max_abs: Optional[float] = None
    bound: Optional[float] = None
    cosine: Optional[float] = None
    npu_calls: int = 0
    tokens_match: Optional[bool] = None
    detail: str = ""


@dataclass
class PortProof:
    """The proof's record (part of stage 02's in the report)."""

    verdict: str
    model_class: str = ""
    model_kind: str = ""
    config: dict = field(default_factory=dict)
    dtype: str = ""
    device: str = ""
    reference: str = ""
    ported_path: str = ""
    emulated: bool = False
    cases: list[ProofCase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def model_files(root: Path, only: Optional[str] = None) -> list[Path]:
    """The files :func:`load_tree` imports: ``only``, else the ``modeling*.py`` files (they
    import what they need; a helper beside them may build a CUDA extension on import), else
    every ``.py`` file of ``root`` but ``setup.py`` (importing it runs a build)."""
    if only is not None:
        files = [root / only]
    else:
        files = sorted(root.glob("modeling*.py")) or sorted(root.glob("*.py"))
    return [file for file in files if file.stem not in ("__init__", "setup", GENERATED_MODULE)]


def config_fix(exc: BaseException, line: str, config: dict) -> Optional[dict]:
    """The config override the failing ``line`` asks for (``config``: the fields the build
    was given); None when the line names no config field."""
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        key = exc.args[0]
        match = re.search(rf"config\.(\w+)\s*\[\s*['\"]{re.escape(key)}['\"]\s*\]", line)
        if match is None:
            return None
        field = match.group(1)
        if key in TYPICAL.get(field, {}):
            return {field: TYPICAL[field]}
        given = config.get(field)
        return {field: {**(given if isinstance(given, dict) else {}), key: UNKNOWN}}
    if isinstance(exc, AttributeError):
        match = _NO_ATTRIBUTE.search(str(exc))
        if match is None or f"config.{match.group(1)}" not in line:
            return None
        return {match.group(1): TYPICAL.get(match.group(1), UNKNOWN)}
    return None


def render(setting: str, fix: dict) -> str:
    """As the user writes it: ``--proof-config 'KEY=JSON'`` flags, or ``setting={...}``."""
    if setting.startswith("--"):
        return " ".join(f"{setting} '{key}={json.dumps(value)}'" for key, value in fix.items())
    return f"{setting}={fix!r}"


def build_failure(error: str, setting: str, fix: Optional[dict], overrides: dict) -> str:
    """The setting that fixes ``error`` and, where derived, the value to try: ``fix`` merged
    into the ``overrides`` the proof was given (setting it must not drop the user's other
    fields)."""
    text = (f"the tiny model could not be built from your config ({error}); set {setting} to "
            "override the config fields the build needs")
    if fix is None:
        return text + " (the fields the model code reads from its config)"
    return text + f", e.g. {render(setting, {**overrides, **fix})}"
