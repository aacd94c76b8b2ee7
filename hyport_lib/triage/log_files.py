"""The log files a triage reads, and which part of each fits its byte budget, as
``docs/triage.md`` ("Finding the logs") describes. A line longer than twice
:data:`MAX_READ_BYTES` keeps its start and end, the middle read past, never held
(:func:`_cut_line`: no piece of a token is shown where no redaction can recognise it).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

from hyport_lib.utils import bounded_files
from hyport_lib.utils.bounded_files import inside
from hyport_lib.utils.wording import counted

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
STREAM_NAMES = ("stdout", "stderr")
#: Folders that hold no logs worth reading (or are not ours to read).
SKIPPED_FOLDERS = ("__pycache__", ".ipynb_checkpoints", ".git", "node_modules")
_CHECKPOINT_FOLDER = re.compile(r"^(?:checkpoint-\d+|global_step\d+)$")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")
#: Most files one path yields; a note says when there were more.
MAX_FILES = 2000
#: Most CANN log files read (the newest first); a note says when there were more.
MAX_CANN_FILES = 400
#: Most levels of folders walked below a path given; a note names what lies deeper.
MAX_DEPTH = 64
#: Paths named in a note about folders or links left out.
_NAMED = 3
#: Files named in a note about what a budget left unread.
NAMED_UNREAD = 5
#: Where CANN writes a process's logs.
CANN_LOG_VAR = "ASCEND_PROCESS_LOG_PATH"
#: Longest part of a line read at once: a longer line keeps this much of its start and end.
MAX_READ_BYTES = 64 * 1024
#: Bytes one triage reads at most, over all its files (scanning runs at tens of MiB/s).
MAX_BYTES = 512 * 2**20
#: Block size for counting the lines of a part of a file that is skipped.
_COUNT_BLOCK = 1 << 20
#: What ends a word where a long line is cut (a token holds none of them).
_SPACE = re.compile(rb"\s")
#: Shown where the middle of a long line was read past.
CUT = " … "


def cann_log_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Where CANN writes its logs, in CANN's own order (its environment reference,
    envref_07_0007); None without a home folder either: CANN then has no default folder."""
    environ = os.environ if environ is None else environ
    configured = (environ.get(CANN_LOG_VAR) or "").strip()
    if configured:
        return Path(configured).expanduser()
    work = (environ.get("ASCEND_WORK_PATH") or "").strip()
    if work:
        return Path(work).expanduser() / "log"
    home = (environ.get("HOME") or "").strip()
    if not home:
        try:
            home = str(Path.home())
        except (RuntimeError, KeyError, OSError):  # no HOME and no passwd entry
            return None
    return Path(home) / "ascend" / "log"


def own_cann_log_env(folder: os.PathLike, environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The CANN log variable for a child: CANN's default folder is shared by every job of the
    user, so a triage of it could blame one card for another's error. ``{}`` keeps the
    user's absolute path; their relative one is made absolute (the child may start in
    another working folder than the one hyport reads the logs from)."""
    environ = os.environ if environ is None else environ
    chosen = (environ.get(CANN_LOG_VAR) or "").strip()
    if chosen:
        return {} if Path(chosen).is_absolute() else {CANN_LOG_VAR: str(Path(chosen).resolve())}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return {CANN_LOG_VAR: str(folder)}


def shared_cann_note(folder: Optional[Path]) -> str:
    """What a diagnosis says when its CANN folder is the user's."""
    return (f"CANN's log folder {folder} was chosen with {CANN_LOG_VAR} and is shared with the other "
            f"cards and jobs: a finding from it may belong to another one")


def natural_key(path: Path) -> list:
    """``ranks/2`` before ``ranks/10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def holds_model_files(names: Iterable[str]) -> bool:
    """A model's or a tokenizer's folder, whose ``*.txt`` files are vocabularies, not logs."""
    names = set(names)
    return any(n in names for n in TOKENIZER_FILES) or (
        "config.json" in names and any(n.endswith(WEIGHT_SUFFIXES) for n in names))


def _wanted(path: Path, beside_model: bool) -> bool:
    if path.suffix.lower() not in LOG_SUFFIXES and path.name not in STREAM_NAMES:
        return False
    return not (beside_model and path.suffix.lower() == ".txt" and "log" not in path.stem.lower())


def named(paths: list, shown: int = _NAMED) -> str:
    """The first ``shown`` of ``paths``, then how many more."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(str(p) for p in paths[:shown]) + more


def walk_files(root: Path, wanted: Callable[[Path, bool], bool],
               max_depth: int = MAX_DEPTH) -> tuple[list[Path], list[str]]:
    """``(files, notes)``: walked with a stack (a deep tree overflowed recursion); links to
    folders are not walked, links to files only kept inside ``root``."""
    found: list[Path] = []
    too_deep: list[Path] = []
    outside: list[Path] = []
    notes: list[str] = []
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as exc:  # removed meanwhile, or no permission: say so, go on
            notes.append(f"{folder}: not walked ({exc.strerror or exc})")
            continue
        beside_model = holds_model_files(entry.name for entry in entries)
        for entry in entries:
            path = Path(entry.path)
            try:
                is_link, is_dir = entry.is_symlink(), entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                notes.append(f"{path}: not read ({exc.strerror or exc})")
                continue
            if is_link and not is_dir and path.is_dir():  # a linked folder: never walked,
                if not inside(root, path):  # named when it leads out (what it holds is unread)
                    outside.append(path)
                continue
            if is_dir:
                if entry.name in SKIPPED_FOLDERS or _CHECKPOINT_FOLDER.match(entry.name):
                    continue
                if depth >= max_depth:
                    too_deep.append(path)
                else:
                    stack.append((path, depth + 1))
            elif wanted(path, beside_model):
                if is_link and not inside(root, path):
                    outside.append(path)
                elif path.is_file() or not is_link:  # a FIFO is kept: its reading says why not
                    found.append(path)
    if too_deep:
        notes.append(f"{root}: {counted(len(too_deep), 'folder')} deeper than {max_depth} levels not walked: "
                     f"{named(too_deep)}")
    if outside:
        notes.append(f"{root}: {counted(len(outside), 'link')} out of the folder not followed: {named(outside)}")
    return found, notes


def find_logs(path: os.PathLike | str, limit: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """``(files, notes)`` in natural order; one file is read whatever its name;
    FileNotFoundError when ``path`` does not exist."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    if root.is_file():
        return [root], []
    if not root.is_dir():
        return [], [f"{root}: not a regular file or folder (a pipe, socket or device); not read"]
    found, notes = walk_files(root, _wanted)
    found.sort(key=natural_key)
    if len(found) > limit:
        notes.append(f"{root}: {len(found)} log files; only the first {limit} were read")
        found = found[:limit]
    return found, notes


def cann_logs(folder: os.PathLike | str, since: Optional[float] = None,
              limit: int = MAX_CANN_FILES) -> tuple[list[Path], list[str]]:
    """``(files, notes)``: the newest ``limit`` modified at or after ``since`` (seconds since
    the epoch; None: all), in natural order. A missing folder (no NPU here) gives a note."""
    root = Path(folder)
    if not root.is_dir():
        return [], [f"CANN log folder {root} does not exist; not read"]
    dated = []
    paths, notes = walk_files(root, lambda path, _: path.suffix == ".log")
    for path in paths:
        try:
            status = path.stat()
        except OSError as exc:  # removed while listing, or unreadable: say so, go on
            notes.append(f"{path}: not read ({exc.strerror or exc})")
            continue
        if not stat.S_ISREG(status.st_mode):  # a FIFO would block the reader forever
            if not stat.S_ISDIR(status.st_mode):
                notes.append(f"{path}: not a regular file (a pipe, socket or device); not read")
            continue
        if since is None or status.st_mtime >= since:
            dated.append((status.st_mtime, path))
    dated.sort(key=lambda d: d[0], reverse=True)
    if len(dated) > limit:
        notes.append(f"{root}: {len(dated)} CANN log files; only the newest {limit} were read")
        dated = dated[:limit]
    return sorted((path for _, path in dated), key=natural_key), notes


class DeadlinePassed(Exception):
    """The reading stopped at its deadline; ``line`` is the last line read whole (0: none)."""

    def __init__(self, line: int) -> None:
        super().__init__(f"deadline passed after line {line}")
        self.line = line


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _skip_to(handle, start: int) -> int:
    """Move ``handle`` to the first line that begins at or after byte ``start``; the number of
    lines before it (so that the lines read next keep their numbers)."""
    lines, left = 0, start
    while left > 0:
        block = handle.read(min(_COUNT_BLOCK, left))
        if not block:
            return lines
        lines += block.count(b"\n")
        left -= len(block)
    handle.seek(start - 1)
    if handle.read(1) != b"\n":  # ``start`` falls inside a line: that line is not read,
        lines += 1  # and it is skipped in blocks (a ``readline`` would hold all of it)
        while block := handle.read(_COUNT_BLOCK):
            end = block.find(b"\n")
            if end >= 0:
                handle.seek(end + 1 - len(block), 1)
                break
    return lines


def _cut_line(head: bytes, rest: bytearray, whole: bool) -> str:
    """A long line as text: ``head`` (its first read) and ``rest`` (what followed, all of it
    when ``whole``, else its last :data:`MAX_READ_BYTES`), joined by :data:`CUT` when the
    middle was read past; each side then drops the word the cut went through."""
    if whole:
        return _decode(head + bytes(rest)).rstrip("\r\n")
    head_end = max((space.end() for space in _SPACE.finditer(head)), default=0)
    tail = _SPACE.search(rest)
    return (_decode(head[:head_end]).rstrip("\r") + CUT
            + _decode(bytes(rest[tail.end():]) if tail else b"").rstrip("\r\n"))


def _passed(deadline: Optional[float]) -> bool:
    return deadline is not None and time.monotonic() > deadline


def read_lines(path: Path, start: int = 0, limit: Optional[int] = None,
               deadline: Optional[float] = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a regular file (OSError otherwise: a pipe named ``*.log``
    would block forever), streaming, from the first whole line at or after byte ``start``
    (numbers still count from the top), at most ``limit`` bytes (a growing file stays in
    budget); :class:`DeadlinePassed` past ``deadline`` (``time.monotonic()``)."""
    with bounded_files.open_regular(path) as handle:
        number = _skip_to(handle, start) if start > 0 else 0
        consumed = 0
        while limit is None or consumed < limit:
            if _passed(deadline):
                raise DeadlinePassed(number)
            head = handle.readline(MAX_READ_BYTES)
            if not head:
                return
            consumed += len(head)
            if head.endswith(b"\n"):
                number += 1
                yield number, _decode(head).rstrip("\r\n")
                continue
            rest, whole, ended = bytearray(), True, False
            while not ended:
                if _passed(deadline):
                    raise DeadlinePassed(number)
                more = handle.readline(MAX_READ_BYTES)
                if not more:
                    break
                consumed += len(more)
                ended = more.endswith(b"\n")
                rest += more
                if len(rest) > MAX_READ_BYTES:
                    del rest[:len(rest) - MAX_READ_BYTES]
                    whole = False
            number += 1
            yield number, _cut_line(head, rest, whole)


@dataclass(frozen=True)
class Planned:
    """One file to read: from byte ``start``, at most ``limit`` bytes."""

    path: Path
    start: int = 0
    limit: Optional[int] = None


def _stat(path: Path, field: str) -> float:
    """``path``'s ``st_size`` or ``st_mtime``; 0 when it cannot be had (reading it will say why)."""
    try:
        return getattr(path.stat(), field)
    except OSError:
        return 0


def _size(count: int) -> str:
    """``16.0 MiB``; a size under 1 MiB in bytes (``4,000 bytes``), never ``0.0 MiB``."""
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else counted(int(count), "byte")


def plan_reading(own: Sequence[Path], cann: Sequence[Path],
                 max_bytes: Optional[int]) -> tuple[list[Planned], list[Path], list[str]]:
    """``(planned, unread, notes)``: which files, and which part of each, fit in ``max_bytes``
    (None: no limit): the run's own logs, then CANN's newest first (its folder holds older
    jobs' files too). A file larger than what is left is read from its end, where a failure is."""
    if max_bytes is None:
        return [Planned(p) for p in [*own, *cann]], [], []
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes={max_bytes!r}: expected a positive number of bytes, or None")
    left = max_bytes
    chosen: dict[Path, Planned] = {}
    unread: list[Path] = []
    notes: list[str] = []
    for path in [*own, *sorted(cann, key=lambda p: _stat(p, "st_mtime"), reverse=True)]:
        size = _stat(path, "st_size")
        if size <= left:
            chosen[path] = Planned(path, 0, size if size else None)
            left -= size
        elif left > 0:
            chosen[path] = Planned(path, size - left, left)
            notes.append(f"{path}: only its last {_size(left)} of {_size(size)} "
                         f"were read (byte budget {_size(max_bytes)})")
            left = 0
        else:
            unread.append(path)
    if unread:
        notes.append(f"byte budget of {_size(max_bytes)} spent: {counted(len(unread), 'log file')} "
                     f"not read: {named(unread, NAMED_UNREAD)}")
    return [chosen[p] for p in [*own, *cann] if p in chosen], unread, notes
