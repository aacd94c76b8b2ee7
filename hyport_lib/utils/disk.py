"""A full disk, said plainly.

torch's checkpoint writer reports a full disk as "basic_ios::clear: iostream error" or
"file write failed", and the rank logs on that disk may not even hold that line; the
free space of the folder's file system tells what happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def disk_full_error(exc: BaseException, folder: Path, needed: int) -> Optional[OSError]:
    """A clear ENOSPC error when ``exc`` (a failed save) came from a full disk under
    ``folder``, else None: that file system has no byte left, or a write failed (or said
    "no space") while less than ``needed`` bytes are free there."""
    import errno
    import shutil

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
    """``<device> (<mount point>)`` of the file system holding ``folder``."""
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
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TB"
