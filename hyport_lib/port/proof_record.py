"""What the port's proof records, and which files of a tree it imports: no torch here.

``hyport port`` without ``--proof`` names the files the proof would import, and the
parent of a proof run reads the child's record back; neither should pay for importing
torch (several seconds and ~240 MB before a 1 MB file is even read).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.scan.rules import GENERATED_MODULE

#: What the proof is doing, as told to ``on_phase`` (a child that dies says when it did).
IMPORT_ORIGINAL = "import of the original code (SRC)"
RUN_ORIGINAL = "the original model's build and forward"
IMPORT_PORTED = "import of the ported code (DST)"
RUN_PORTED = "the ported model's build and forward"


@dataclass
class ProofCase:
    """One input case of the proof."""

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
    """The proof's record (a stage-02 record in the report)."""

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
