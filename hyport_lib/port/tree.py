"""``port_tree``: copy a source tree, rewrite the copy, write ``port.diff`` and ``port.json``.

The source is only read. The copy is built in a temporary folder beside the
destination and renamed into place when complete, so an interrupted port leaves no
half-written tree. Porting a ported tree again changes nothing: the generated module
carries a marker and is written as it is, and every rewrite yields code the rewrite
does not match again.
"""

from __future__ import annotations

import difflib
import json
import shutil
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import libcst as cst

from hyport_lib.port.codemod import (GENERATED_MODULE, Change, ManualSpot, port_python,
                                     unpad_arities, uses_relative_imports)
from hyport_lib.port.requirements import port_requirements
from hyport_lib.scan.scanner import file_kind, not_regular
from hyport_lib.utils.files import atomic_write_text

GENERATED_SOURCE = Path(__file__).parent / "generated" / f"{GENERATED_MODULE}.py"
GENERATED_MARKER = "# Written by `hyport port`"
DIFF_NAME = "port.diff"
JSON_NAME = "port.json"
#: Never copied: version control, caches, virtual environments. Everything else is (a
#: ``build/`` or ``dist/`` folder of the model's code is code).
NOT_COPIED = (".git", ".hg", ".svn", "__pycache__", ".ipynb_checkpoints", ".mypy_cache",
              ".pytest_cache", ".venv", "venv", "site-packages", "*.egg-info")


def generated_module_text(unpad_returns: int = 5) -> str:
    """The generated module, serving ``unpad_input`` with ``unpad_returns`` values."""
    text = GENERATED_SOURCE.read_text(encoding="utf-8")
    return text.replace("UNPAD_INPUT_RETURNS = 5\n", f"UNPAD_INPUT_RETURNS = {unpad_returns}\n", 1)


class PortError(ValueError):
    """A port that cannot start: a missing source, a destination in the way."""


@dataclass
class PortResult:
    """What ``port_tree`` did.

    Attributes:
        src, dst: the folders, as resolved paths.
        changes: every rewrite, by file and line.
        manual: every spot left for a human, with why.
        files_changed: files whose text changed (relative paths).
        generated: files the port added (the generated module, once per folder).
        unparsable: ``(file, error)`` for Python files LibCST could not parse (copied as is).
        diff: the unified diff of the whole port (``a/`` = source, ``b/`` = port).
        flash_attn_pin: the flash-attn version the requirements pinned, if any.
        proof: the proof's record, once made (see :mod:`hyport_lib.port.proof`).
    """

    src: str
    dst: str
    changes: list[Change] = field(default_factory=list)
    manual: list[ManualSpot] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    generated: list[str] = field(default_factory=list)
    unparsable: list[tuple[str, str]] = field(default_factory=list)
    diff: str = ""
    flash_attn_pin: Optional[str] = None
    proof: Optional[dict] = None

    def to_dict(self) -> dict:
        return {
            "src": self.src, "dst": self.dst,
            "files_changed": self.files_changed, "generated": self.generated,
            "changes": [c.to_dict() for c in self.changes],
            "manual": [m.to_dict() for m in self.manual],
            "unparsable": [{"file": f, "error": e} for f, e in self.unparsable],
            "flash_attn_pin": self.flash_attn_pin,
            "proof": self.proof,
        }

    def frame(self):
        """Changes and manual spots as one pandas DataFrame (file, line, kind, before,
        after / why)."""
        import pandas as pd

        rows = [{"file": c.file, "line": c.line, "kind": c.kind, "before": c.before,
                 "after": c.after, "left_for_a_human": ""} for c in self.changes]
        rows += [{"file": m.file, "line": m.line, "kind": m.kind, "before": m.snippet,
                  "after": "", "left_for_a_human": m.why} for m in self.manual]
        return pd.DataFrame(rows, columns=["file", "line", "kind", "before", "after",
                                           "left_for_a_human"])


def _ignored(root: Path, relative: Path) -> bool:
    import fnmatch

    if relative.parts and relative.parts[0] in (DIFF_NAME, JSON_NAME) and len(relative.parts) == 1:
        return True  # a ported tree's own record is not part of the code
    return any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in NOT_COPIED)


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and not _ignored(root, p.relative_to(root)))


def _encoding(path: Path) -> str:
    """A Python file's declared encoding (PEP 263; UTF-8 without a cookie), UTF-8 else."""
    if path.suffix != ".py":
        return "utf-8"
    with open(path, "rb") as handle:
        try:
            return tokenize.detect_encoding(handle.readline)[0]
        except SyntaxError:  # an unknown encoding name: read as UTF-8, bytes kept
            return "utf-8"


def _read(path: Path) -> str:
    """The file's text exactly: its own encoding, line endings as they are, undecodable
    bytes kept (written back as they were)."""
    with open(path, encoding=_encoding(path), errors="surrogateescape", newline="") as handle:
        return handle.read()


def _write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    with open(path, "w", encoding=encoding, errors="surrogateescape", newline="") as handle:
        handle.write(text)


def _unified(rel: str, before: Optional[str], after: str) -> str:
    def lines(text: str) -> list[str]:
        # split on "\n" only: a form feed or U+2028 inside a line is not a line end to patch
        parts = text.split("\n")
        out = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(difflib.unified_diff(
        lines(before or ""), lines(after),
        fromfile="/dev/null" if before is None else f"a/{rel}", tofile=f"b/{rel}"))


def port_tree(src: str | Path, dst: str | Path) -> PortResult:
    """Port the tree ``src`` into the new folder ``dst``.

    Args:
        src: a folder of model code (or one ``.py`` file).
        dst: where the ported copy goes; must not exist, or be an empty folder.

    Returns:
        A :class:`PortResult`; ``port.diff`` and ``port.json`` are written into ``dst``.

    Raises:
        PortError: ``src`` is missing, ``dst`` is not empty, or ``dst`` lies inside ``src``.
    """
    source, target = Path(src).resolve(), Path(dst).resolve()
    if not source.exists():
        raise PortError(f"hyport port: SRC {str(src)!r} does not exist")
    if target == source or source in target.parents:
        raise PortError(f"hyport port: --out {str(dst)!r} lies inside SRC {str(src)!r}")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise PortError(f"hyport port: --out {str(dst)!r} exists and is not an empty folder")
    base = source.parent if source.is_file() else source
    result = PortResult(src=str(source), dst=str(target))
    outputs: dict[str, str] = {}
    originals: dict[str, str] = {}
    needs_module: set[Path] = set()  # folders whose files import the generated module
    arities: set[int] = set()
    files = [f for f in _files(source) if not not_regular(f)]
    # One answer per folder: a remote-code folder is one package (transformers loads its
    # files together), so a helper file without relative imports imports relatively too.
    sources = {f: _read(f) for f in files if f.suffix == ".py"}
    relative_folders = {f.parent for f in files if f.name == "__init__.py" or (
        f in sources and uses_relative_imports(sources[f]))}
    for file in files:
        rel = file.relative_to(base).as_posix()
        kind = file_kind(file, explicit=source.is_file())
        if file.name == f"{GENERATED_MODULE}.py":
            continue  # the generated module: written afresh below when still needed
        if kind not in ("python", "requirements"):
            continue
        text = sources[file] if file in sources else _read(file)
        if kind == "requirements":
            new, changes = port_requirements(text, rel)
            result.changes += changes
        else:
            relative = file.parent in relative_folders
            arities |= unpad_arities(text)
            try:
                ported = port_python(text, rel, relative=relative)
            except cst.ParserSyntaxError as exc:
                result.unparsable.append((rel, str(exc).splitlines()[0]))
                continue
            new = ported.code
            result.changes += ported.changes
            result.manual += ported.manual
            if ported.code is not None:
                needs_module.add(Path(rel).parent)
        if new is not None and new != text:
            outputs[rel], originals[rel] = new, text
    unpad_returns = 4 if arities == {4} else 5
    if len(arities) > 1:
        result.manual.append(ManualSpot("", 0, "unpad_input", "",
                                        "the code unpacks unpad_input into both 4 and 5 values: "
                                        "the generated module returns 5; fix the other calls"))
    for folder in sorted(needs_module):
        rel = (folder / f"{GENERATED_MODULE}.py").as_posix()
        existing = base / rel
        generated = generated_module_text(unpad_returns)
        if existing.exists() and _read(existing) == generated:
            continue
        outputs[rel] = generated
        originals[rel] = _read(existing) if existing.exists() else None
        result.generated.append(rel)
    result.files_changed = sorted(r for r in outputs if r not in result.generated)
    encodings = {rel: _encoding(base / rel) if (base / rel).exists() else "utf-8" for rel in outputs}
    result.diff = "".join(_unified(rel, originals[rel], outputs[rel]) for rel in sorted(outputs))
    # The patch holds each file's lines in that file's own encoding, so that it applies.
    diff_bytes = b"".join(_unified(rel, originals[rel], outputs[rel]).encode(
        encodings[rel], "surrogateescape") for rel in sorted(outputs))
    result.flash_attn_pin = next((c.before for c in result.changes
                                  if c.kind == "requirement" and "flash" in c.before.lower()), None)
    _write(source, base, target, {rel: (outputs[rel], encodings[rel]) for rel in outputs},
           diff_bytes, result)
    return result


def _write(source: Path, base: Path, target: Path, outputs: dict[str, tuple[str, str]],
           diff: bytes, result: PortResult):
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for file in _files(source):
            if not_regular(file):
                continue
            rel = file.relative_to(base)
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, staging / rel)
        for rel, (text, encoding) in outputs.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            _write_text(staging / rel, text, encoding)
        (staging / DIFF_NAME).write_bytes(diff)
        (staging / JSON_NAME).write_text(json.dumps(result.to_dict(), indent=2) + "\n",
                                         encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_record(result: PortResult) -> Path:
    """Rewrite ``port.json`` in the destination (after the proof has been added)."""
    return atomic_write_text(Path(result.dst) / JSON_NAME,
                             json.dumps(result.to_dict(), indent=2) + "\n")
