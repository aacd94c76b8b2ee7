"""Requirement files of a port: flash-attn out, a note on torch_npu in.

Each line is read with ``packaging``'s requirement parser (a wheel file or URL of
flash-attn counts too); lines that are not requirements (options, comments, blank) are
kept as they are.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from hyport_lib.port.codemod import GENERATED_MODULE, Change

FLASH_NAMES = {"flash-attn", "flash-attn-2"}
TORCH_NPU_NOTE = ("# torch-npu: install the release built for this host's torch and CANN "
                  "(e.g. torch-npu==2.8.0.post2 with torch==2.8.0, CANN 8.5); never let pip "
                  "replace torch")
_ARCHIVE = re.compile(r"(^|/)flash[-_]attn-[\w.+-]+\.(whl|tar\.gz|zip)\b")


def _is_flash_attn(line: str) -> bool:
    code = line.split(" #", 1)[0].strip()
    if not code or code.startswith(("#", "-")):
        return False
    if _ARCHIVE.search(code) or "flash-attention.git" in code:
        return True
    try:
        return canonicalize_name(Requirement(code).name) in FLASH_NAMES
    except InvalidRequirement:
        return False


def port_requirements(text: str, rel: str) -> tuple[str | None, list[Change]]:
    """The requirement file without flash-attn, and one change per removed line.

    Returns ``(None, [])`` when the file names no flash-attn.
    """
    lines = text.splitlines(keepends=True)
    changes, out = [], []
    for number, line in enumerate(lines, start=1):
        if _is_flash_attn(line):
            ending = "\n" if line.endswith("\n") else ""
            note = (f"# {line.strip()}  (removed by hyport port: {GENERATED_MODULE}.py serves "
                    "its API)")
            out.append(note + ending)
            changes.append(Change(rel, number, "requirement", line.strip(), note))
        else:
            out.append(line)
    if not changes:
        return None, []
    if TORCH_NPU_NOTE not in text:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(TORCH_NPU_NOTE + "\n")
    return "".join(out), changes
