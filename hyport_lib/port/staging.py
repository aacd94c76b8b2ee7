"""The staged copy of a port: what of SRC it copies, and the staging folder DST is built in.

The walk never follows a link. A link that stays inside SRC is recreated as a relative
link, so its target is ported once (a link copied as a file would be a second, unported
copy). Links out of SRC, loops, dangling links, FIFOs, sockets, devices and unreadable
entries are not copied; each is named with its reason. Every read goes through
:mod:`hyport_lib.utils.bounded_files` (regular files only, never blocking, never out of SRC).

The port is built beside DST and renamed into place when whole. A SIGKILL leaves the
staging folder, so each port first removes stale ones: only those named
``.DST.hyport-staging-HOST-PID-START-XXXX``, owned by this user, made on this host (HOST
digests the host name and PID namespace: on a shared file system another machine's PID
means nothing here), whose process is gone (no PID, or one started at another START).
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import io
import os
import re
import shutil
import socket
import stat
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.utils.bounded_files import UnreadableFile, inside, kind_of, open_regular, read_bytes
from hyport_lib.utils.signals import shielded

#: The largest file the port rewrites (a larger one is copied as it was, "not rewritten"):
#: the largest transformers modeling file is about 0.3 MB; a file above the bound is
#: generated or a bundle to port piece by piece. Its port takes seconds (bench/bench_port_bounds.py).
MAX_REWRITE_BYTES = 2 << 20
#: Never copied: version control, caches, virtual environments. Everything else is (a
#: ``build/`` or ``dist/`` folder of the model's code is code).
NOT_COPIED = (".git", ".hg", ".svn", "__pycache__", ".ipynb_checkpoints", ".mypy_cache",
              ".pytest_cache", ".venv", "venv", "site-packages", "*.egg-info")
COPY_CHUNK = 1 << 20


@dataclass
class SourceTree:
    """SRC as the port copies it; paths relative to ``base`` (SRC, or a lone file's folder):
    regular ``files``, ``(path, target)`` of ``links`` inside SRC, ``(path, reason)`` of
    entries ``skipped``."""

    base: Path
    files: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def ignored(relative: str, record_names: tuple[str, ...] = ()) -> bool:
    """Whether the port never copies this path (``record_names``: the port's own
    records at the top of a ported tree, not part of its code)."""
    parts = Path(relative).parts
    if len(parts) == 1 and parts[0] in record_names:
        return True
    return any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in NOT_COPIED)


def _link(base: Path, path: Path, rel: str, record_names) -> tuple[Optional[str], str]:
    """(target to recreate, "") for a link inside SRC, else (None, why it is skipped)."""
    pointed = os.readlink(path)
    if not inside(base, path):
        return None, f"a link out of SRC (to {os.path.realpath(path)}): not followed"
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, f"a link loop (to {pointed}): not followed"
        return None, f"a dangling link (to {pointed}): not copied"
    real = os.path.realpath(path)
    target_rel = Path(os.path.relpath(real, base)).as_posix()
    if ignored(target_rel, record_names):
        return None, f"a link to {target_rel}, which the port does not copy"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return None, f"a link to {kind_of(mode)}: not copied"
    return os.path.relpath(real, base / Path(rel).parent), ""


def walk_source(source: Path, record_names: tuple[str, ...] = ()) -> SourceTree:
    """Every entry of ``source`` (a folder, or one file) the port copies, links and
    skips, in sorted order; nothing is followed through a link."""
    if not source.is_dir():
        return SourceTree(source.parent, files=[source.name])
    tree = SourceTree(source)
    stack = [source]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError as exc:
            rel = Path(folder).relative_to(source).as_posix()
            tree.skipped.append((rel, f"a folder that cannot be read ({exc.strerror}): not copied"))
            continue
        for entry in entries:
            path = Path(entry.path)
            rel = path.relative_to(source).as_posix()
            if ignored(rel, record_names):
                continue
            if entry.is_symlink():
                target, why = _link(source, path, rel, record_names)
                if target is None:
                    tree.skipped.append((rel, why))
                else:
                    tree.links.append((rel, target))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif entry.is_file(follow_symlinks=False):
                tree.files.append(rel)
            else:
                tree.skipped.append((rel, f"{kind_of(entry.stat(follow_symlinks=False).st_mode)}: "
                                          "not copied"))
    tree.files.sort()
    tree.links.sort()
    tree.skipped.sort()
    return tree


@dataclass
class SourceText:
    """A code file's text as the port rewrites it, and how to write it back."""

    text: Optional[str]  # None: not rewritten (``why`` says so), copied as it was
    encoding: str = "utf-8"
    bom: bool = False
    why: str = ""

    def encode(self, text: str) -> bytes:
        return (b"\xef\xbb\xbf" if self.bom else b"") + text.encode(self.encoding)

    def as_in_file(self, text: str) -> str:
        """``text`` as its lines stand in the file, for the diff: a BOM is part of line 1
        (``patch`` and ``git apply`` compare line 1 with it)."""
        return ("\ufeff" if self.bom else "") + text


def read_code(path: Path, folder: Path, python: bool) -> SourceText:
    """The text of a file to rewrite, in its own encoding (PEP 263 for Python, UTF-8
    else), line endings as they are; UnreadableFile when it is not a regular file in ``folder``.
    """
    try:
        data = read_bytes(path, MAX_REWRITE_BYTES, folder=folder)
    except UnreadableFile as exc:
        if exc.errno == errno.EFBIG:
            return SourceText(None, why=f"larger than {MAX_REWRITE_BYTES >> 20} MiB "
                                        "(copied as it was)")
        raise
    encoding = "utf-8"
    if python:
        try:
            encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        except SyntaxError as exc:  # not UTF-8 without a cookie, or an unknown cookie
            why = "not valid UTF-8 and no PEP 263 coding line" if "missing" in str(exc) else str(exc)
            return SourceText(None, why=f"{why} (copied as it was)")
    bom = encoding == "utf-8-sig"
    encoding = "utf-8" if bom else encoding
    try:
        text = data[3 if bom else 0:].decode(encoding)
    except UnicodeDecodeError as exc:
        return SourceText(None, why=f"not valid {encoding} at byte {exc.start} "
                                    "(copied as it was)")
    return SourceText(text, encoding, bom)


def copy_file(path: Path, folder: Path, destination: Path) -> None:
    """Copy a regular file of SRC (bytes, mode and times) to ``destination``: UnreadableFile
    when the source cannot be read, OSError (of the destination) when writing fails."""
    with open_regular(path, folder) as source:
        info = os.fstat(source.fileno())
        with open(destination, "wb") as out:
            while True:
                try:
                    chunk = source.read(COPY_CHUNK)
                except OSError as exc:
                    raise UnreadableFile(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
                if not chunk:
                    break
                out.write(chunk)
    os.chmod(destination, stat.S_IMODE(info.st_mode))
    os.utime(destination, ns=(info.st_atime_ns, info.st_mtime_ns))


# --------------------------------------------------------------------------- staging
_STAGING = re.compile(r"^\..*\.hyport-staging-(?:(?P<host>[0-9a-f]{8})-)?(?P<pid>\d+)-(?P<start>\d+)"
                      r"-[A-Za-z0-9_]+$")


def host_id() -> str:
    """8 hex digits naming this host and PID namespace: where a PID means this process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}\0{namespace}".encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``), or None
    where there is no ``/proc`` or no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19])  # field 22 of stat(5), counted after the command's ")"


def owner_gone(pid: int, start: int) -> bool:
    """Whether the port process ``pid`` that started at ``start`` has ended: no such
    process, or a live ``pid`` that started at another time (the PID was reused; an
    unknown start, or no ``/proc``, is taken as the same process, and kept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user holds the PID
    now = _start_ticks(pid)
    return now is not None and start != 0 and now != start


def make_staging(target: Path) -> Path:
    """A new, empty staging folder for ``target``, named for :func:`remove_stale`."""
    pid = os.getpid()
    prefix = f".{target.name}.hyport-staging-{host_id()}-{pid}-{_start_ticks(pid) or 0}-"
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    # mkdtemp makes it private (0700); the port gets the mode any new folder gets
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    return staging


def remove_staging(staging: Path) -> None:
    """Remove a staging folder; a second stop signal waits until it is gone."""
    with shielded():
        shutil.rmtree(staging, ignore_errors=False, onerror=_already_gone)


def _already_gone(function, path, exc_info) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def remove_stale(folder: Path) -> list[str]:
    """Remove the staging folders in ``folder`` left by ports whose process is gone;
    their paths."""
    removed, here = [], host_id()
    try:
        names = os.listdir(folder)
    except OSError:
        return removed  # no folder (yet) or none to read: nothing left there by a port
    for name in sorted(names):
        match = _STAGING.match(name)
        if not match or match.group("host") not in (None, here):
            continue  # another host's (its PID means nothing here)
        path = folder / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue  # removed meanwhile (by another port)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if owner_gone(int(match.group("pid")), int(match.group("start"))):
            remove_staging(path)
            removed.append(str(path))
    return removed
