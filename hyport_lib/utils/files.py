"""Atomic file writes: a reader never sees half a file. JSON is strict: NaN and Infinity,
which parsers refuse, become ``null`` (:func:`json_ready`), as pandas' ``to_json`` does.

A full disk is said plainly (:func:`disk_full_error`): torch's checkpoint writer reports it
as "basic_ios::clear: iostream error" or "file write failed", and the rank logs on that
disk may not even hold that line; the free space of the folder's file system tells.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike, mode: Optional[int] = None) -> Iterator[str]:
    """A temporary file beside ``path`` for the block to write, renamed onto it at the end.
    It gets ``mode``, else what ``open(path, "w")`` would give (0666 less the umask), not
    mkstemp's 0600: reports are meant to be shared."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_target(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


def json_ready(data: Any) -> Any:
    """Every non-finite float (NaN, ±Inf) as None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_ready(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(v) for v in data]
    return data


def dumps_json(data: Any, **kwargs) -> str:
    """Strict JSON: non-finite floats as null, other objects as text."""
    return json.dumps(json_ready(data), allow_nan=False, default=str, **kwargs)


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, dumps_json(data, indent=2) + "\n")


def ensure_writable(folder: str | os.PathLike) -> Path:
    """Created, and proven writable with a private temporary file (safe when several
    launches check the same folder at once)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".hyport-write-test-", dir=folder)
    os.close(fd)
    os.unlink(probe)
    return folder


def disk_full_error(exc: BaseException, folder: Path, needed: int) -> Optional[OSError]:
    """A clear ENOSPC error when ``exc`` (a failed save) came from a full disk under
    ``folder``, else None: that file system has no byte left, or a write failed (or said
    "no space") while less than ``needed`` bytes are free there."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    said_full = any(getattr(e, "errno", None) == errno.ENOSPC or "No space left" in str(e) for e in chain)
    write_failed = any(word in str(e) for e in chain for word in ("iostream error", "file write failed",
                                                                     "PytorchStreamWriter"))
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    # The folder's own file system must be (nearly) full: a full /dev/shm or another disk
    # also says "No space left", and is another story.
    if not (free == 0 or ((said_full or write_failed) and free < max(needed, 1))):
        return None
    return OSError(errno.ENOSPC, f"no space left on {_device_of(folder)} while saving a checkpoint into "
                                 f"{folder}: {human_size(free)} free, the checkpoint needs about {human_size(needed)}; "
                                 "free space, or choose another output_dir", str(folder))


def _device_of(folder: Path) -> str:
    """``<device> (<mount point>)``."""
    import psutil

    best = None
    resolved = str(folder.resolve())
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint.rstrip("/") or "/"
        if (resolved == mount or resolved.startswith(mount.rstrip("/") + "/")) and \
                (best is None or len(mount) > len(best.mountpoint)):
            best = part
    return f"{best.device} ({best.mountpoint})" if best else "its file system"


def human_size(count: float) -> str:
    """Bytes in binary units (KiB, MiB, GiB: what ``df -h`` counts)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
