"""Stage 01's file reads under a root (this machine's ``/`` or a copied tree), bounded.

A copied tree (``hyport env --host-root TREE``) may hold anything where a file belongs: a
FIFO at ``/proc/1/cgroup`` blocks ``open`` for ever, a device node (``/dev/zero`` copied
with ``cp -a``) never ends. Every file the stage reads goes through here: the path taken
with :func:`~hyport_lib.environment.tree_paths.under`, read by
:mod:`hyport_lib.utils.bounded_files` (regular files only, never blocking, bounded). An
absent file is no error (most are optional); a refused one is a one-line :func:`refusal`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

from hyport_lib.environment.tree_paths import under
from hyport_lib.utils.bounded_files import UnreadableFile, check_regular, read_text
from hyport_lib.utils.printable import printable

#: ``/proc`` files (``cgroup``, ``mountinfo``, ``mounts``): they report a size of 0, the
#: bound is on the bytes read; 1 MiB holds thousands of mount lines.
MAX_PROC_BYTES = 1 << 20
#: ``version.info`` / ``ascend_toolkit_install.info`` / ``/etc/os-release``: a few dozen lines.
MAX_VERSION_BYTES = 64 << 10
#: A YAML configuration (accelerate's): a few hundred lines at most.
MAX_CONFIG_BYTES = 1 << 20
#: errno of a file that is simply not there (a folder above it may be a file).
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


def tree_file(root: os.PathLike, path: str) -> Path:
    """``path`` (as inside the container) under ``root``, its links followed in the tree.

    Raises:
        UnreadableFile: more links on the way than Linux follows (a loop), naming the link.
    """
    try:
        return under(root, path)
    except OSError as exc:
        raise UnreadableFile(exc.filename or path, f"{exc.strerror} (a link loop)",
                             exc.errno or errno.ELOOP) from None


def is_absent(exc: UnreadableFile) -> bool:
    """Whether the refusal only says the file is not there."""
    return exc.errno in _ABSENT


def refusal(exc: UnreadableFile) -> str:
    """``PATH: cannot be read: WHY`` in one line (the tree's names without terminal escapes);
    a permission refusal says what to do."""
    line = printable(f"{exc.path}: cannot be read: {exc.reason}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        line += " (run as a user who may read it: the driver's and CANN's files are root's)"
    return line


def read_optional(root: os.PathLike, path: str, max_bytes: int, refused: list[str]) -> Optional[str]:
    """The text of ``path`` under ``root`` (at most ``max_bytes``), or None when the file is
    absent or refused (not a regular file, too large, unreadable, a link loop); a refusal
    is appended to ``refused`` as one line (:func:`refusal`), so nothing is dropped silently."""
    try:
        return read_text(tree_file(root, path), max_bytes, folder=root)
    except UnreadableFile as exc:
        if not is_absent(exc):
            refused.append(refusal(exc))
        return None


def regular_file_in_tree(root: os.PathLike, path: str) -> Optional[Path]:
    """``path`` under ``root`` when it is a regular file there (links followed inside the
    tree only); None otherwise. For files whose presence is all that counts (``set_env.sh``)."""
    try:
        found = tree_file(root, path)
        check_regular(found, folder=root)
    except UnreadableFile:
        return None
    return found
