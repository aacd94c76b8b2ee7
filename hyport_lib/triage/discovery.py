"""Which files to read: the logs under a run folder, a log folder or one file
(:func:`find_logs`), and the CANN logs a failed run left (:func:`cann_logs`).

Every ``*.log``, ``*.txt``, ``*.out``, ``*.err``, ``stdout`` and ``stderr`` file is read,
checkpoint folders skipped. A folder holding a model or tokenizer is still walked (training
saves weights beside its ``logs/``), but its ``*.txt`` files only when named for a log
(``vocab.txt`` is none; LLaMA-Factory's ``running_log.txt`` is). CANN's folder collects
every job's logs, so :func:`cann_logs` keeps the files modified since the failed run began.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from hyport_lib.utils.bounded_files import inside

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


def cann_log_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Where CANN writes its logs: ``$ASCEND_PROCESS_LOG_PATH``, else
    ``$ASCEND_WORK_PATH/log``, else ``$HOME/ascend/log`` (CANN's environment reference,
    envref_07_0007). None without any of them and no home folder (a container user without
    a passwd entry): CANN then has no default folder either.
    """
    environ = os.environ if environ is None else environ
    configured = (environ.get("ASCEND_PROCESS_LOG_PATH") or "").strip()
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


def natural_key(path: Path) -> list:
    """Sort key that puts ``ranks/2`` before ``ranks/10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def is_log_file(path: Path) -> bool:
    return path.suffix.lower() in LOG_SUFFIXES or path.name in STREAM_NAMES


def holds_model_files(names: Iterable[str]) -> bool:
    """Whether a folder with these file names holds a model or a tokenizer (whose ``*.txt``
    files are vocabularies, not logs)."""
    names = set(names)
    return any(n in names for n in TOKENIZER_FILES) or (
        "config.json" in names and any(n.endswith(WEIGHT_SUFFIXES) for n in names))


def _wanted(path: Path, beside_model: bool) -> bool:
    if not is_log_file(path):
        return False
    return not (beside_model and path.suffix.lower() == ".txt" and "log" not in path.stem.lower())


def named(paths: list, shown: int = _NAMED) -> str:
    """The first ``shown`` of ``paths``, then how many more."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(str(p) for p in paths[:shown]) + more


def walk_files(root: Path, wanted: Callable[[Path, bool], bool],
               max_depth: int = MAX_DEPTH) -> tuple[list[Path], list[str]]:
    """``(files, notes)``: the files under ``root`` that ``wanted(path, beside_model)`` keeps,
    walked with a stack (a deep tree overflowed recursion) at most ``max_depth`` levels; links
    to folders are not walked, links to files only kept inside ``root``."""
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
        notes.append(f"{root}: {len(too_deep)} folder(s) deeper than {max_depth} levels not walked: "
                     f"{named(too_deep)}")
    if outside:
        notes.append(f"{root}: {len(outside)} link(s) out of the folder not followed: {named(outside)}")
    return found, notes


def find_logs(path: os.PathLike | str, limit: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """``(files, notes)``: the log files under ``path`` (a folder, or one file read whatever
    its name), in natural order, at most ``limit``; FileNotFoundError when it does not exist."""
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
    """``(files, notes)``: CANN's log files under ``folder`` modified at or after ``since``
    (seconds since the epoch; None: all), the newest ``limit``, in natural order. A missing
    folder (a host without an NPU) gives a note."""
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
