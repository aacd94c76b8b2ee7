"""Paths as a container sees them, read under a root: this machine's ``/`` or a copied tree
(``hyport env --host-root TREE``). A symbolic link in the copy means what it means inside
the container: an absolute target (``npu-smi -> /usr/local/Ascend/driver/tools/npu-smi``)
is the tree's path; following it through this machine's ``/`` would judge the wrong files.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: Most symbolic links followed in one path (Linux's own limit).
MAX_LINKS = 40


def is_machine_root(root: os.PathLike) -> bool:
    """True when ``root`` is this machine's own ``/`` (device nodes must then be real)."""
    return Path(root).resolve() == Path("/")


def under(root: os.PathLike, path: str) -> Path:
    """``path`` (as inside the container; the leading ``/`` optional) under ``root``, its
    symbolic links followed inside ``root``; ``..`` never leaves the root, as in the container.

    Raises:
        OSError: ``ELOOP``, more than :data:`MAX_LINKS` links on the way (a loop).
    """
    root = Path(root)
    if is_machine_root(root):
        return Path("/") / path.lstrip("/")
    pending = [part for part in path.split("/") if part]
    kept: list[str] = []
    links = 0
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            del kept[-1:]
            continue
        candidate = root.joinpath(*kept, name)
        if not candidate.is_symlink():
            kept.append(name)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(candidate))
        target = os.readlink(candidate)
        if target.startswith("/"):
            kept = []
        pending = [part for part in target.split("/") if part] + pending
    return root.joinpath(*kept)


def present(root: os.PathLike, path: str) -> bool:
    """Whether ``path`` exists under ``root`` (a link loop or an unreadable folder: False)."""
    try:
        return under(root, path).exists()
    except OSError:
        return False
