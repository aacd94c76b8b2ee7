"""``port_tree``: copy a source tree, rewrite the copy, write ``port.diff`` and ``port.json``.

The source is only read; the copy is staged beside the destination (:mod:`.staging`).
Porting a ported tree again changes nothing: no rewrite matches the code a rewrite writes.
Python files are rewritten by :mod:`.codemod`; requirement files here
(:func:`port_requirements`: flash-attn out, a note on torch_npu in), each line read as the
scan reads it (a wheel file, an archive or the repository of flash-attn counts too).

``port.diff`` applies with ``git apply`` and ``patch -p1`` and is fast on big files:
:class:`difflib.SequenceMatcher` is quadratic in the worst case (12 s for a 1 MB file with a
few hundred rewritten lines), so lines are matched the *patience* way: lines found once on
each side anchor the match, and only the short stretches between anchors go to
SequenceMatcher. Hunks are written exactly as :func:`difflib.unified_diff` writes them.
"""

from __future__ import annotations

import bisect
import json
import os
import stat
from collections import Counter
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Optional

from hyport_lib.port.codemod import Change, ManualSpot, port_python
from hyport_lib.proof.port_record import PortProof
from hyport_lib.port.segments import UnparsableSource, unpad_arities, uses_relative_imports
from hyport_lib.port.staging import (SourceText, SourceTree, copy_file, make_staging, read_code, remove_stale,
                                     remove_staging, walk_source)
from hyport_lib.scan.dependencies import requirement_name, requirement_spec
from hyport_lib.scan.rules import FLASH_ATTN_PACKAGES, GENERATED_MODULE, normalize_dist_name
from hyport_lib.scan.scanner import file_kind
from hyport_lib.utils.bounded_files import UnreadableFile, kind_of
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.typed_records import from_mapping

GENERATED_SOURCE = Path(__file__).parent / "generated" / f"{GENERATED_MODULE}.py"
DIFF_NAME = "port.diff"
JSON_NAME = "port.json"


def generated_module_text(unpad_returns: int = 5) -> str:
    """The generated module, serving ``unpad_input`` with ``unpad_returns`` values."""
    text = GENERATED_SOURCE.read_text(encoding="utf-8")
    return text.replace("UNPAD_INPUT_RETURNS = 5\n", f"UNPAD_INPUT_RETURNS = {unpad_returns}\n", 1)


TORCH_NPU_NOTE = ("# torch-npu: install the release built for this host's torch and CANN "
                  "(e.g. torch-npu==2.8.0.post2 with torch==2.8.0, CANN 8.5); never let pip "
                  "replace torch")


def _is_flash_attn(logical: str) -> bool:
    spec = requirement_spec(logical)
    name = requirement_name(spec) if spec else None
    return name is not None and normalize_dist_name(name) in FLASH_ATTN_PACKAGES


def _logical_lines(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(first line number, physical lines) of each requirement, ``\\`` continuations joined."""
    out: list[tuple[int, list[str]]] = []
    for number, line in enumerate(lines, start=1):
        if out and out[-1][1][-1].rstrip("\r\n").endswith("\\"):
            out[-1][1].append(line)
        else:
            out.append((number, [line]))
    return out


def port_requirements(text: str, rel: str) -> tuple[str | None, list[Change]]:
    """The requirement file without flash-attn, and one change per removed requirement
    (each of its physical lines commented out, line endings kept); ``(None, [])`` when the
    file names no flash-attn."""
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


class PortError(ValueError):
    """A port that cannot start: a missing source, a destination in the way."""


#: PortResult's (a, b) lists and the keys each pair is written under.
_PAIRS = {"unparsable": ("file", "error"), "not_rewritten": ("file", "reason"),
          "skipped": ("path", "reason"), "links": ("path", "target")}


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
    proof: Optional[PortProof] = None  # once made (:mod:`hyport_lib.proof.port`)

    def to_dict(self) -> dict:
        return {
            "src": self.src, "dst": self.dst,
            "files_changed": self.files_changed, "generated": self.generated,
            "changes": [asdict(c) for c in self.changes],
            "manual": [asdict(m) for m in self.manual],
            **{name: [dict(zip(keys, pair)) for pair in getattr(self, name)] for name, keys in _PAIRS.items()},
            "removed_staging": self.removed_staging,
            "flash_attn_pin": self.flash_attn_pin,
            "proof": self.proof.to_dict() if self.proof is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "PortResult":
        """A recorded port: its pairs are written as objects (:data:`_PAIRS`)."""
        pairs = {name: [tuple(item[key] for key in keys) for item in data[name]
                        if isinstance(item, dict) and all(key in item for key in keys)]
                 for name, keys in _PAIRS.items() if isinstance(data.get(name), list)}
        return from_mapping(cls, {**data, **pairs})

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


# --------------------------------------------------------------------------- port.diff
#: A stretch between anchors with more lines than this on both sides (no line in it is
#: unique) is written as replaced rather than matched line by line: still a correct
#: patch, and SequenceMatcher's cost stays bounded.
SMALL_STRETCH = 2000
CONTEXT = 3


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of ``pairs`` (sorted by their first item) whose second items rise."""
    tails: list[int] = []  # smallest second item ending a run of each length
    tail_index: list[int] = []
    previous: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k], tail_index[k] = j, index
        previous.append(tail_index[k - 1] if k else -1)
    run, index = [], tail_index[-1] if tail_index else -1
    while index >= 0:
        run.append(pairs[index])
        index = previous[index]
    return run[::-1]


def _matched_pairs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """(i, j) of each line of ``a`` matched with line j of ``b``, rising in both."""
    pairs: list[tuple[int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            pairs.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            pairs.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        count_a, count_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
        where_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
        anchors = _longest_increasing([(i, where_b[a[i]]) for i in range(alo, ahi)
                                       if count_a[a[i]] == 1 and a[i] in where_b])
        if anchors:
            pairs += anchors
            bounds = [(alo - 1, blo - 1), *anchors, (ahi, bhi)]
            stack += [(i1 + 1, i2, j1 + 1, j2) for (i1, j1), (i2, j2) in zip(bounds, bounds[1:])]
        elif ahi - alo <= SMALL_STRETCH or bhi - blo <= SMALL_STRETCH:
            matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            pairs += [(alo + i + k, blo + j + k) for i, j, size in matcher.get_matching_blocks()
                      for k in range(size)]
    return sorted(pairs)


def _matching_blocks(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    blocks: list[list[int]] = []
    for i, j in _matched_pairs(a, b):
        if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
            blocks[-1][2] += 1
        else:
            blocks.append([i, j, 1])
    return [tuple(block) for block in blocks] + [(len(a), len(b), 0)]


def _range(start: int, stop: int) -> str:
    """A hunk's range as unified diffs write it (difflib's own rule)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1  # an empty range starts before the first line
    return f"{beginning},{length}"


def unified_lines(a: list[str], b: list[str], fromfile: str, tofile: str) -> list[str]:
    """What ``difflib.unified_diff(a, b, fromfile, tofile)`` yields, matched as above."""
    matcher = SequenceMatcher(None, [], [])
    matcher.a, matcher.b = a, b
    matcher.matching_blocks, matcher.opcodes = _matching_blocks(a, b), None
    out: list[str] = []
    for group in matcher.get_grouped_opcodes(CONTEXT):
        if not out:
            out += [f"--- {fromfile}\n", f"+++ {tofile}\n"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return out


def file_diff(rel: str, before: Optional[str], after: str) -> str:
    """The unified diff of one file (``a/`` = source, ``b/`` = port; a new file from
    ``/dev/null``), lines split at ``\\n`` only: a form feed or U+2028 inside a line is
    not a line end to ``patch``."""
    def lines(text: str) -> list[str]:
        parts = text.split("\n")
        out = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(unified_lines(lines(before or ""), lines(after),
                                 "/dev/null" if before is None else f"a/{rel}", f"b/{rel}"))
