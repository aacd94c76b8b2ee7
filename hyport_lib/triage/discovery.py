"""Which files to read: the logs under a run folder, a log folder or one file, and the
CANN logs a failed run left.

A hyport run folder (``outputs/<run-id>/``) holds, among notebooks and results, the logs
of its stages: ``logs/NN_stage.log``, training's ``train/<name>/logs/torchrun.log`` and
torchrun's per-rank folders ``logs/ranks/<run>/attempt_<n>/<rank>/{stdout,stderr}.log``,
inference's per-card logs. Every ``*.log``, ``*.txt``, ``*.out`` and ``*.err`` file under
the path is read, and files named ``stdout`` / ``stderr``; model folders (a
``config.json`` beside the weights, ``checkpoint-*``, ``global_step*``) are skipped, since
their text files are vocabularies, not logs.

CANN writes its own logs under ``$ASCEND_PROCESS_LOG_PATH`` (``~/ascend/log`` when unset):
``debug/plog/plog-<pid>_<stamp>.log``, ``run/plog/...``, ``debug/device-<id>/device-<pid>_
<stamp>.log``. That folder collects every job's logs, so :func:`cann_logs` keeps the files
modified since a given time: those of the failed run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
STREAM_NAMES = ("stdout", "stderr")
#: Folders that hold no logs worth reading (or are not ours to read).
SKIPPED_FOLDERS = ("__pycache__", ".ipynb_checkpoints", ".git", "node_modules")
_MODEL_FOLDER = re.compile(r"^(?:checkpoint-\d+|global_step\d+)$")
#: Most files one path yields; a note says when there were more.
MAX_FILES = 2000
#: Most CANN log files read (the newest first); a note says when there were more.
MAX_CANN_FILES = 400


def cann_log_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """Where CANN writes its logs: ``$ASCEND_PROCESS_LOG_PATH``, else ``$HOME/ascend/log``."""
    environ = os.environ if environ is None else environ
    configured = (environ.get("ASCEND_PROCESS_LOG_PATH") or "").strip()
    if configured:
        return Path(configured).expanduser()
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / "ascend" / "log"


def natural_key(path: Path) -> list:
    """Sort key that puts ``ranks/2`` before ``ranks/10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def is_log_file(path: Path) -> bool:
    return path.suffix.lower() in LOG_SUFFIXES or path.name in STREAM_NAMES


def _is_model_folder(folder: Path, names: Iterable[str]) -> bool:
    names = set(names)
    return bool(_MODEL_FOLDER.match(folder.name)) or (
        "config.json" in names and any(n.endswith((".safetensors", ".bin")) for n in names))


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
    found: list[Path] = []
    notes: list[str] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if here != root and _is_model_folder(here, names):
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d not in SKIPPED_FOLDERS]
        found.extend(here / n for n in names if is_log_file(here / n) and (here / n).is_file())
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
    for path in root.rglob("*.log"):
        try:
            mtime = path.stat().st_mtime
        except OSError as exc:  # removed while listing, or unreadable: say so, go on
            dated.append((None, path, exc))
            continue
        if since is None or mtime >= since:
            dated.append((mtime, path, None))
    notes = [f"{path}: not read ({exc.strerror or exc})" for mtime, path, exc in dated if exc]
    dated = sorted((d for d in dated if d[2] is None), key=lambda d: d[0], reverse=True)
    if len(dated) > limit:
        notes.append(f"{root}: {len(dated)} CANN log files; only the newest {limit} were read")
        dated = dated[:limit]
    return sorted((path for _, path, _ in dated), key=natural_key), notes
