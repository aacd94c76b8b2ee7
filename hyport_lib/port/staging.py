"""The staging folder a port is built in beside DST (renamed into place when whole), and
what is left of one.

A SIGKILL leaves the folder, so each port first removes stale ones: only those named
``.DST.hyport-staging-HOST-PID-START-XXXX``, owned by this user, made on this host (HOST
digests the host name and PID namespace: on a shared file system another machine's PID
means nothing here), whose process is gone (no PID, or one started at another START).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Optional

from hyport_lib.utils.signals import shielded

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
