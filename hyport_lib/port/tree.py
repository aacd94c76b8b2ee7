"""``port_tree``: copy a source tree, rewrite the copy, write ``port.diff`` and ``port.json``.

The source is only read; the copy is staged beside the destination (:mod:`.staging`).
Porting a ported tree again changes nothing: no rewrite matches the code a rewrite writes.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.port.codemod import Change, ManualSpot, port_python
from hyport_lib.port.patch import file_diff
from hyport_lib.port.proof_record import PortProof
from hyport_lib.port.requirements import port_requirements
from hyport_lib.port.segments import UnparsableSource, unpad_arities, uses_relative_imports
from hyport_lib.port.source_tree import (SourceText, SourceTree, copy_file, read_code,
                                         walk_source)
from hyport_lib.port.staging import make_staging, remove_stale, remove_staging
from hyport_lib.scan.rules import GENERATED_MODULE
from hyport_lib.scan.scanner import file_kind
from hyport_lib.utils.bounded_files import UnreadableFile, kind_of
from hyport_lib.utils.files import atomic_write_text

GENERATED_SOURCE = Path(__file__).parent / "generated" / f"{GENERATED_MODULE}.py"
DIFF_NAME = "port.diff"
JSON_NAME = "port.json"


def generated_module_text(unpad_returns: int = 5) -> str:
    """The generated module, serving ``unpad_input`` with ``unpad_returns`` values."""
    text = GENERATED_SOURCE.read_text(encoding="utf-8")
    return text.replace("UNPAD_INPUT_RETURNS = 5\n", f"UNPAD_INPUT_RETURNS = {unpad_returns}\n", 1)


class PortError(ValueError):
    """A port that cannot start: a missing source, a destination in the way."""


@dataclass
class PortResult:
    """What ``port_tree`` did (paths relative to ``src``; ``port.json`` is :meth:`to_dict`)."""

    src: str
    dst: str
    changes: list[Change] = field(default_factory=list)
    manual: list[ManualSpot] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    generated: list[str] = field(default_factory=list)  # the generated module, once per folder
    unparsable: list[tuple[str, str]] = field(default_factory=list)  # (file, error): copied as is
    #: (file, why): code files copied as they were (too large, not text in their encoding)
    not_rewritten: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): not copied
    links: list[tuple[str, str]] = field(default_factory=list)
    removed_staging: list[str] = field(default_factory=list)  # of earlier, killed ports
    diff: str = ""  # of the whole port (a/ = source, b/ = port)
    flash_attn_pin: Optional[str] = None
    proof: Optional[PortProof] = None  # once made (:mod:`hyport_lib.port.proof`)

    def to_dict(self) -> dict:
        return {
            "src": self.src, "dst": self.dst,
            "files_changed": self.files_changed, "generated": self.generated,
            "changes": [asdict(c) for c in self.changes],
            "manual": [asdict(m) for m in self.manual],
            "unparsable": [{"file": f, "error": e} for f, e in self.unparsable],
            "not_rewritten": [{"file": f, "reason": r} for f, r in self.not_rewritten],
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "links": [{"path": p, "target": t} for p, t in self.links],
            "removed_staging": self.removed_staging,
            "flash_attn_pin": self.flash_attn_pin,
            "proof": self.proof.to_dict() if self.proof is not None else None,
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


def _check_destination(src: str | Path, dst: str | Path, source: Path, target: Path) -> None:
    """Refuse, in one line, a port that cannot start (:class:`PortError`)."""
    try:
        mode = os.stat(source).st_mode
    except FileNotFoundError:
        raise PortError(f"SRC {str(src)!r} does not exist") from None
    except OSError as exc:
        raise PortError(f"SRC {str(src)!r} cannot be read ({exc.strerror})") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise PortError(f"SRC {str(src)!r} is {kind_of(mode)}, not a folder or a file of code")
    if target == source or source in target.parents:
        raise PortError(f"--out {str(dst)!r} lies inside SRC {str(src)!r}")
    above = next(p for p in (target, *target.parents) if os.path.lexists(p))
    if above != target and not above.is_dir():
        raise PortError(f"--out {str(dst)!r} lies under {str(above)!r}, which is not a folder")
    if above == target:
        if not target.is_dir() or any(target.iterdir()):
            raise PortError(f"--out {str(dst)!r} exists and is not an empty folder")
        if os.path.ismount(target):
            raise PortError(f"--out {str(dst)!r} is a mount point: the port is renamed into "
                            "place, which a mount point cannot take; name a new folder inside it")


def port_tree(src: str | Path, dst: str | Path) -> PortResult:
    """Port the tree ``src`` (a folder of model code, or one ``.py`` file) into ``dst``
    (a new or empty folder), with ``port.diff`` and ``port.json`` written there; PortError
    (one line) when ``src`` or ``dst`` will not do or ``dst`` cannot be written.
    """
    source, target = Path(src).resolve(), Path(dst).resolve()
    _check_destination(src, dst, source, target)
    tree = walk_source(source, record_names=(DIFF_NAME, JSON_NAME))
    base = tree.base
    result = PortResult(src=str(source), dst=str(target), skipped=tree.skipped, links=tree.links)
    outputs: dict[str, str] = {}
    originals: dict[str, Optional[str]] = {}
    formats: dict[str, SourceText] = {}
    needs_module: set[Path] = set()  # folders whose files import the generated module
    arities: set[int] = set()
    kinds = {rel: file_kind(base / rel, explicit=not source.is_dir()) for rel in tree.files}
    code = [rel for rel in tree.files if kinds[rel] in ("python", "requirements")
            and Path(rel).name != f"{GENERATED_MODULE}.py"]  # the generated module: below
    texts: dict[str, SourceText] = {}
    for rel in code:
        try:
            texts[rel] = read_code(base / rel, base, python=kinds[rel] == "python")
        except UnreadableFile as exc:
            result.skipped.append((rel, f"cannot be read ({exc.reason}): not copied"))
            continue
        if texts[rel].text is None:
            result.not_rewritten.append((rel, texts[rel].why))
    sources = {rel: t.text for rel, t in texts.items() if t.text is not None and kinds[rel] == "python"}
    # One answer per folder: a remote-code folder is one package (transformers loads its
    # files together), so a helper file without relative imports imports relatively too.
    relative_folders = {Path(rel).parent for rel in tree.files if Path(rel).name == "__init__.py"}
    relative_folders |= {Path(rel).parent for rel, text in sources.items() if uses_relative_imports(text)}
    for rel, read in texts.items():
        if read.text is None:
            continue
        if kinds[rel] == "requirements":
            new, changes = port_requirements(read.text, rel)
            result.changes += changes
        else:
            arities |= unpad_arities(read.text)
            try:
                ported = port_python(read.text, rel, relative=Path(rel).parent in relative_folders)
            except UnparsableSource as exc:
                result.unparsable.append((rel, str(exc)))
                continue
            new = ported.code
            result.changes += ported.changes
            result.manual += ported.manual
            if ported.code is not None:
                needs_module.add(Path(rel).parent)
        if new is not None and new != read.text:
            outputs[rel], originals[rel], formats[rel] = new, read.text, read
    unpad_returns = 4 if arities == {4} else 5
    if len(arities) > 1:
        result.manual.append(ManualSpot("", 0, "unpad_input", "",
                                        "the code unpacks unpad_input into both 4 and 5 values: "
                                        "the generated module returns 5; fix the other calls"))
    for folder in sorted(needs_module):
        rel = (folder / f"{GENERATED_MODULE}.py").as_posix()
        generated = generated_module_text(unpad_returns)
        existing = _existing_generated(base, rel, tree)
        if existing is not None and existing.text == generated:
            continue
        outputs[rel] = generated
        originals[rel] = existing.text if existing is not None else None
        formats[rel] = existing if existing is not None and existing.text is not None else SourceText("")
        result.generated.append(rel)
    result.files_changed = sorted(r for r in outputs if r not in result.generated)
    diffs = {rel: file_diff(rel, None if originals[rel] is None
                            else formats[rel].as_in_file(originals[rel]),
                            formats[rel].as_in_file(outputs[rel])) for rel in sorted(outputs)}
    result.diff = "".join(diffs.values())
    # The patch holds each file's lines in that file's own encoding, so that it applies.
    diff_bytes = b"".join(text.encode(formats[rel].encoding) for rel, text in diffs.items())
    result.flash_attn_pin = next((c.before for c in result.changes
                                  if c.kind == "requirement" and "flash" in c.before.lower()), None)
    _write(tree, target, {rel: formats[rel].encode(text) for rel, text in outputs.items()},
           diff_bytes, result)
    return result


def _existing_generated(base: Path, rel: str, tree: SourceTree) -> Optional[SourceText]:
    """The generated module a ported tree already holds, read, or None."""
    if rel not in tree.files:
        return None
    try:
        return read_code(base / rel, base, python=True)
    except UnreadableFile:
        return None


def _write(tree: SourceTree, target: Path, outputs: dict[str, bytes], diff: bytes,
           result: PortResult) -> None:
    """Build the port in a staging folder beside ``target``, then rename it into place; an
    OSError becomes a :class:`PortError` naming the destination path, never the source's."""
    where = target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        result.removed_staging = remove_stale(target.parent)
        staging = make_staging(target)
    except OSError as exc:
        raise PortError(f"cannot write --out {str(target)!r}: {exc.strerror or exc}") from None
    try:
        for rel in tree.files:
            where = target / rel
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            if rel in outputs:
                (staging / rel).write_bytes(outputs[rel])
                continue
            try:
                copy_file(tree.base / rel, tree.base, staging / rel)
            except UnreadableFile as exc:
                result.skipped.append((rel, f"cannot be read ({exc.reason}): not copied"))
                (staging / rel).unlink(missing_ok=True)
        for rel, link_target in tree.links:
            where = target / rel
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link_target, staging / rel)
        for rel in result.generated:
            where = target / rel
            (staging / rel).write_bytes(outputs[rel])
        result.skipped.sort()
        where = target / DIFF_NAME
        (staging / DIFF_NAME).write_bytes(diff)
        where = target / JSON_NAME
        (staging / JSON_NAME).write_text(json.dumps(result.to_dict(), indent=2) + "\n",
                                         encoding="utf-8")
        where = target
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.rename(target)
    except OSError as exc:
        remove_staging(staging)
        raise PortError(f"cannot write {where}: {exc.strerror or exc}; nothing was written "
                        f"to --out") from None
    except BaseException:
        remove_staging(staging)
        raise


def write_record(result: PortResult) -> Path:
    """Rewrite ``port.json`` in the destination (after the proof has been added)."""
    return atomic_write_text(Path(result.dst) / JSON_NAME,
                             json.dumps(result.to_dict(), indent=2) + "\n")
