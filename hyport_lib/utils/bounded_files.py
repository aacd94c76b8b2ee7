"""One reader for every file hyport reads from a folder or tree the user names, which may
hold a FIFO that blocks ``open``, a device node that never ends, a link to
``/etc/shadow`` or a log of a gigabyte. Only regular files are opened, without blocking;
at most ``max_bytes`` are read (``/proc`` files report size 0, so the bound is on bytes
read); with ``folder=``, links out of it are refused. Every refusal is an
:class:`UnreadableFile` whose message is one line naming the file and why.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, Optional


class UnreadableFile(OSError):
    """A file hyport will not read; ``str()`` is one line naming it and saying why."""

    def __init__(self, path: os.PathLike | str, reason: str, code: int = errno.EINVAL):
        super().__init__(code, reason, str(path))
        self.path = str(path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class NotARegularFile(UnreadableFile):
    """A FIFO, socket, device node or folder where a file was expected."""


class FileTooLarge(UnreadableFile):
    """A file larger than the bound its reader sets."""


class OutsideFolder(UnreadableFile):
    """A path whose links lead out of the folder it was found in."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words (for messages and skip notes)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def inside(folder: os.PathLike | str, path: os.PathLike | str) -> bool:
    """Every link on ``path`` followed (and on ``folder``)."""
    base = os.path.realpath(folder)
    real = os.path.realpath(path)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def check_inside(folder: os.PathLike | str, path: os.PathLike | str) -> None:
    if not inside(folder, path):
        raise OutsideFolder(path, f"a link out of {folder} (to {os.path.realpath(path)}); "
                                  "links out of a folder hyport is given are not followed",
                            errno.EXDEV)


def check_regular(path: os.PathLike | str, folder: Optional[os.PathLike | str] = None) -> os.stat_result:
    """``path``'s ``stat`` (links followed), or :class:`UnreadableFile`."""
    if folder is not None:
        check_inside(folder, path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UnreadableFile(path, "no such file", errno.ENOENT) from None
    except OSError as err:
        raise UnreadableFile(path, err.strerror or str(err), err.errno or errno.EIO) from None
    if not stat.S_ISREG(info.st_mode):
        raise NotARegularFile(path, f"{kind_of(info.st_mode)}, not a regular file")
    return info


def open_regular(path: os.PathLike | str, folder: Optional[os.PathLike | str] = None) -> BinaryIO:
    """Opened non-blocking and checked again on the open descriptor: a file swapped for a
    FIFO between the check and the open is still refused, and never waited on."""
    check_regular(path, folder)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise UnreadableFile(path, err.strerror or str(err), err.errno or errno.EIO) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, f"{kind_of(mode)}, not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: os.PathLike | str, max_bytes: int,
               folder: Optional[os.PathLike | str] = None) -> bytes:
    """The whole file, or :class:`FileTooLarge` past ``max_bytes``."""
    with open_regular(path, folder) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileTooLarge(path, f"larger than {_size(max_bytes)}, the most hyport reads of such a file",
                           errno.EFBIG)
    return data


def read_text(path: os.PathLike | str, max_bytes: int, folder: Optional[os.PathLike | str] = None,
              encoding: str = "utf-8", errors: str = "replace") -> str:
    return read_bytes(path, max_bytes, folder).decode(encoding, errors=errors)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"
