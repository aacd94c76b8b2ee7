"""Which files to read: the logs under a run folder, a log folder or one file, and the
CANN logs a failed run left.

A hyport run folder (``outputs/<run-id>/``) holds, among notebooks and results, the logs
of its stages: ``logs/NN_stage.log``, training's ``train/<name>/logs/torchrun.log`` and
torchrun's per-rank folders ``logs/ranks/<run>/attempt_<n>/<rank>/{stdout,stderr}.log``,
inference's per-card logs. Every ``*.log``, ``*.txt``, ``*.out`` and ``*.err`` file under
the path is read, and files named ``stdout`` / ``stderr``. Checkpoint folders
(``checkpoint-*``, ``global_step*``) are skipped. A folder that holds a model or a
tokenizer (``config.json`` beside weights, ``tokenizer_config.json`` ...) is still walked:
training saves its weights into the very folder whose ``logs/`` holds the rank logs; only
its ``*.txt`` files are passed over unless their name says log (``merges.txt`` and
``vocab.txt`` are vocabularies; LLaMA-Factory's ``running_log.txt`` is read).

CANN writes its own logs under ``$ASCEND_PROCESS_LOG_PATH`` (``~/ascend/log`` when unset):
``debug/plog/plog-<pid>_<stamp>.log``, ``run/plog/...``, ``debug/device-<id>/device-<pid>_
<stamp>.log``. That folder collects every job's logs, so :func:`cann_logs` keeps the files
modified since a given time: those of the failed run.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable, Mapping, Optional

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


def cann_log_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Where CANN writes its logs: ``$ASCEND_PROCESS_LOG_PATH``, else
    ``$ASCEND_WORK_PATH/log``, else ``$HOME/ascend/log`` (the order of CANN's environment
    reference, ``ASCEND_WORK_PATH``: envref_07_0007).

    Returns None when neither can be told: no variable, no ``HOME`` and no home folder in
    the user database (a container run as a user id without a passwd entry). CANN then has
    no default folder either; callers say so instead of reading one.
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
    if beside_model and path.suffix.lower() == ".txt" and "log" not in path.stem.lower():
        return False
    return path.is_file()


def find_logs(path: os.PathLike | str, limit: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """The log files under ``path`` (a run folder, a log folder or one file), in natural order.

    Args:
        path: a folder to search, or one file (read whatever its name).
        limit: most files returned.

    Returns:
        ``(files, notes)``: notes say what was left out and why.

    Raises:
        FileNotFoundError: ``path`` does not exist (named in the message).
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    if root.is_file():
        return [root], []
    if not root.is_dir():
        return [], [f"{root}: not a regular file or folder (a pipe, socket or device); not read"]
    found: list[Path] = []
    notes: list[str] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIPPED_FOLDERS and not _CHECKPOINT_FOLDER.match(d)]
        beside_model = holds_model_files(names)
        found.extend(here / n for n in names if _wanted(here / n, beside_model))
    found.sort(key=natural_key)
    if len(found) > limit:
        notes.append(f"{root}: {len(found)} log files; only the first {limit} were read")
        found = found[:limit]
    return found, notes


def cann_logs(folder: os.PathLike | str, since: Optional[float] = None,
              limit: int = MAX_CANN_FILES) -> tuple[list[Path], list[str]]:
    """CANN's log files under ``folder`` modified at or after ``since``.

    Args:
        folder: the CANN log folder (see :func:`cann_log_dir`).
        since: seconds since the epoch; None: every file.
        limit: most files returned (the newest).

    Returns:
        ``(files, notes)``, the files in natural order; a missing folder gives no file and a
        note saying so (on a host without an NPU there is none).
    """
    root = Path(folder)
    if not root.is_dir():
        return [], [f"CANN log folder {root} does not exist; not read"]
    dated = []
    notes = []
    for path in root.rglob("*.log"):
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
