"""Atomic file writes: a reader never sees half a file. JSON is strict: NaN and Infinity,
which parsers refuse, become ``null`` (:func:`json_ready`), as pandas' ``to_json`` does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike, mode: Optional[int] = None) -> Iterator[str]:
    """A temporary file beside ``path`` for the block to write; renamed onto ``path`` when
    the block ends, removed when it raises.

    The file gets ``mode``, else the permissions an ordinary ``open(path, "w")`` would give
    (0666 less the umask), not mkstemp's 0600: reports are meant to be shared.
    """
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
    """Write ``data`` to ``path`` through a temporary file and a rename (:func:`atomic_target`)."""
    with atomic_target(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    return atomic_write_bytes(path, text.encode(encoding))


def json_ready(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, ±Inf) replaced by None, recursively."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_ready(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(v) for v in data]
    return data


def dumps_json(data: Any, **kwargs) -> str:
    """Strict JSON text of ``data`` (non-finite floats as null, other objects as text)."""
    return json.dumps(json_ready(data), allow_nan=False, default=str, **kwargs)


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, dumps_json(data, indent=2) + "\n")


def ensure_writable(folder: str | os.PathLike) -> Path:
    """Create ``folder`` and prove it writable with a private temporary file (safe when
    several launches check the same folder at once). Raises the OSError otherwise."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".hyport-write-test-", dir=folder)
    os.close(fd)
    os.unlink(probe)
    return folder
