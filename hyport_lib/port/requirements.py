"""Requirement files of a port: flash-attn out, a note on torch_npu in.

Each line is read with ``packaging``'s requirement parser (a wheel file or URL of
flash-attn counts too); lines that are not requirements (options, comments, blank) are
kept as they are.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from hyport_lib.port.codemod import Change
from hyport_lib.scan.rules import GENERATED_MODULE

FLASH_NAMES = {"flash-attn", "flash-attn-2"}
TORCH_NPU_NOTE = ("# torch-npu: install the release built for this host's torch and CANN "
                  "(e.g. torch-npu==2.8.0.post2 with torch==2.8.0, CANN 8.5); never let pip "
                  "replace torch")
_ARCHIVE = re.compile(r"(^|/)flash[-_]attn-[\w.+-]+\.(whl|tar\.gz|zip)\b")


def _is_flash_attn(logical: str) -> bool:
    code = re.split(r"\s#", logical, maxsplit=1)[0].strip()
    if not code or code.startswith("#"):
        return False
    if _ARCHIVE.search(code) or "flash-attention.git" in code or "flash-attention@" in code:
        return True  # a wheel, an archive or the repository, also after -e / --editable
    if code.startswith("-"):
        return False
    try:
        return canonicalize_name(Requirement(code.split(" --")[0].strip()).name) in FLASH_NAMES
    except InvalidRequirement:
        return False


def _logical_lines(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(first line number, physical lines) of each requirement, ``\\`` continuations joined."""
    out, current, start = [], [], 1
    for number, line in enumerate(lines, start=1):
        if not current:
            start = number
        current.append(line)
        if not line.rstrip("\r\n").endswith("\\"):
            out.append((start, current))
            current = []
    if current:
        out.append((start, current))
    return out


def port_requirements(text: str, rel: str) -> tuple[str | None, list[Change]]:
    """The requirement file without flash-attn, and one change per removed requirement
    (each of its physical lines commented out, line endings kept).

    Returns ``(None, [])`` when the file names no flash-attn.
    """
    lines = text.splitlines(keepends=True)
    changes, out = [], []
    newline = "\r\n" if "\r\n" in text else "\n"
    for number, physical in _logical_lines(lines):
        logical = " ".join(line.rstrip("\r\n").rstrip("\\").strip() for line in physical)
        if not _is_flash_attn(logical):
            out += physical
            continue
        for i, line in enumerate(physical):
            body = line.rstrip("\r\n")
            ending = line[len(body):]
            suffix = f"  (removed by hyport port: {GENERATED_MODULE}.py serves its API)" if i == 0 else ""
            out.append(f"# {body.strip()}{suffix}{ending}")
        changes.append(Change(rel, number, "requirement", logical,
                              f"# {logical}  (removed by hyport port)"))
    if not changes:
        return None, []
    if TORCH_NPU_NOTE not in text:
        if out and not out[-1].endswith("\n"):
            out[-1] += newline
        out.append(TORCH_NPU_NOTE + newline)
    return "".join(out), changes
