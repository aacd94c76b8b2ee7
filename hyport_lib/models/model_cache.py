"""Checkpoints hyport builds once and keeps in its cache (``$HYPORT_CACHE``).

Several processes may ask at once (a grid starts its workers together): :func:`build_once`
builds in a private folder under a file lock and renames it into place; a folder is
complete when its marker file (written last) exists, so no process sees half a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Union

from hyport_lib.utils.imports import package_version

CACHE_ENV_VAR = "HYPORT_CACHE"


def default_cache_root() -> Path:
    """``$HYPORT_CACHE`` when set, else ``~/.cache/hyport``."""
    root = os.environ.get(CACHE_ENV_VAR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "hyport"


def transformers_major() -> int:
    """The installed transformers' major version, read without importing it."""
    return int((package_version("transformers") or "0").split(".")[0])


def cache_folder(stem: str, cache_dir: Optional[Union[str, os.PathLike]] = None, tail: str = "") -> Path:
    """``<cache root>/<stem>-tf<transformers major><tail>`` (``cache_dir`` None: the default
    root). transformers 4.x and 5.x save processors and tokenizers differently: their
    caches are kept apart so that switching stacks never loads the other one's files."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return root / f"{stem}-tf{transformers_major()}{tail}"


def build_once(folder: Path, marker: str, build: Callable[[Path], None], what: str) -> Path:
    """``folder``, built first by ``build(temporary folder)`` (which writes ``marker``
    last) unless it holds ``marker``. Raises PermissionError naming ``$HYPORT_CACHE`` when
    the cache cannot be written."""
    if (folder / marker).is_file():
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=".write-test-", dir=folder.parent))
        probe.rmdir()
    except OSError as exc:
        where = f"${CACHE_ENV_VAR}={os.environ[CACHE_ENV_VAR]}" if os.environ.get(CACHE_ENV_VAR) \
            else f"the default cache {folder.parent}"
        raise PermissionError(exc.errno, f"cannot build {what}: {where} is not writable "
                                         f"({exc.strerror}); set {CACHE_ENV_VAR} to a writable folder",
                              str(folder.parent)) from None
    with exclusive_lock(folder.parent / f".{folder.name}.lock"):
        if (folder / marker).is_file():  # another process built it while we waited
            return folder
        if folder.exists():  # left by something other than this function: rebuild
            discard(folder)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.build-", dir=folder.parent))
        try:
            build(tmp)
            # mkdtemp makes the folder private and transformers writes the weights
            # -rw-------: give everything the modes a plain mkdir/open would (before
            # the rename: never seen private).
            share_modes(tmp)
            try:
                os.rename(tmp, folder)
            except OSError:
                # Without a working lock (e.g. a filesystem lacking flock) another
                # process may have won the race: its folder is as good as ours.
                if not (folder / marker).is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux: fall back to setting and restoring it below
        status = ""
    for line in status.splitlines():
        if line.startswith("Umask:"):  # Linux 4.7+
            return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_modes(folder: Path) -> None:
    """chmod ``folder``, its sub-folders (0o777) and files (0o666) minus the umask."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def discard(folder: Path) -> None:
    # Rename first so a half-deleted folder is never mistaken for the checkpoint.
    trash = folder.with_name(f".{folder.name}.discard-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path):
    """An flock on ``path``; where flock is unavailable, rely on the atomic rename."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the rename race is still safe
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
