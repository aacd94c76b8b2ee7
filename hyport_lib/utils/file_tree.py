"""Paths and files as a container sees them, read under a root: this machine's ``/`` or a
copied tree (``hyport env --host-root TREE``, ``docs/containers.md``).

A link in the copy means what it means inside the container: an absolute target is the
tree's path; following it through this machine's ``/`` would judge the wrong files. A copy
may also hold a FIFO where ``/proc/1/cgroup`` belongs (``open`` blocks for ever) or a
device node (``/dev/zero`` copied with ``cp -a`` never ends), so every file the stage
reads is found with :func:`under` and read by :mod:`hyport_lib.utils.bounded_files`. An
absent file is no error (most are optional); a refused one is a one-line :func:`refusal`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

from hyport_lib.utils.bounded_files import UnreadableFile, check_regular, read_text
from hyport_lib.utils.printable import printable

#: Most symbolic links followed in one path (Linux's own limit).
MAX_LINKS = 40
#: ``/proc`` files (``cgroup``, ``mountinfo``, ``mounts``): they report a size of 0, the
#: bound is on the bytes read; 1 MiB holds thousands of mount lines.
MAX_PROC_BYTES = 1 << 20
#: ``version.info`` / ``ascend_toolkit_install.info`` / ``/etc/os-release``: a few dozen lines.
MAX_VERSION_BYTES = 64 << 10
#: A YAML configuration (accelerate's): a few hundred lines at most.
MAX_CONFIG_BYTES = 1 << 20


def is_machine_root(root: os.PathLike) -> bool:
    """True when ``root`` is this machine's own ``/`` (device nodes must then be real)."""
    return Path(root).resolve() == Path("/")


def under(root: os.PathLike, path: str) -> Path:
    """``path`` (the leading ``/`` optional) under ``root``, its links followed inside
    ``root``; ``..`` never leaves the root, as in the container. OSError ``ELOOP`` past
    :data:`MAX_LINKS` links (a loop)."""
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


def tree_file(root: os.PathLike, path: str) -> Path:
    """:func:`under`, a link loop refused as an :class:`UnreadableFile` naming the link."""
    try:
        return under(root, path)
    except OSError as exc:
        raise UnreadableFile(exc.filename or path, f"{exc.strerror} (a link loop)",
                             exc.errno or errno.ELOOP) from None


def is_absent(exc: UnreadableFile) -> bool:
    return exc.errno in (errno.ENOENT, errno.ENOTDIR)  # a folder above it may be a file


def refusal(exc: UnreadableFile) -> str:
    """``PATH: cannot be read: WHY`` in one line (the tree's names without terminal escapes);
    a permission refusal says what to do."""
    line = printable(f"{exc.path}: cannot be read: {exc.reason}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        line += " (run as a user who may read it: the driver's and CANN's files are root's)"
    return line


def read_optional(root: os.PathLike, path: str, max_bytes: int, refused: list[str]) -> Optional[str]:
    """The text of ``path`` under ``root``, or None when it is absent or refused; a refusal
    is appended to ``refused`` (:func:`refusal`), so nothing is dropped silently."""
    try:
        return read_text(tree_file(root, path), max_bytes, folder=root)
    except UnreadableFile as exc:
        if not is_absent(exc):
            refused.append(refusal(exc))
        return None


def regular_file_in_tree(root: os.PathLike, path: str) -> Optional[Path]:
    """``path`` under ``root`` when it is a regular file there, else None: for files whose
    presence is all that counts (``set_env.sh``)."""
    try:
        found = tree_file(root, path)
        check_regular(found, folder=root)
    except UnreadableFile:
        return None
    return found
