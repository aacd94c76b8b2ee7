"""What in ``output_dir`` hyport wrote, and one training run per folder.

hyport removes or overwrites only what it can prove it wrote: its own files (:data:`OWN_NAMES`),
checkpoints carrying one of its markers, and the final files a run listed in its run marker.
Anything else stops the run before launch unless ``overwrite_output_dir=True``.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
from pathlib import Path

from hyport_lib.train.checkpoints import is_hyport_checkpoint, list_checkpoints, read_json_object
from hyport_lib.utils.files import atomic_write_json

RUN_MARKER = "hyport_run.json"
#: Files and folders every hyport run writes into output_dir (besides checkpoints).
OWN_NAMES = frozenset({RUN_MARKER, "logs", "smoke_data", "metrics.jsonl", "train_result.json",
                       "dataset_problems.jsonl", "hyport_deepspeed.json"})


def lock_file(node_rank: int = 0) -> str:
    return f".hyport_train.node{int(node_rank)}.lock"


def is_own_name(name: str, own: set) -> bool:
    """hyport's name: an own file, a hidden ``.hyport*`` file (locks, write probes, test
    markers) or the temporary file of an atomic write of an own file."""
    if name in own or name.startswith(".hyport"):
        return True
    return name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{n}.") for n in own)


#: Locks this process holds: output_dir -> open lock file.
_HELD: dict[str, object] = {}


class OutputDirBusy(ValueError):
    """Another hyport run holds the output folder."""


class ForeignFiles(ValueError):
    """output_dir holds files hyport did not write (and would overwrite or remove)."""


def lock_output_dir(output_dir: Path, node_rank: int = 0) -> None:
    """Take (or keep) this process's exclusive ``flock`` on ``output_dir`` for ``node_rank`` (the
    nodes of one job may share the folder). The kernel releases it when the process dies: a
    SIGKILL never leaves a stale lock. :class:`OutputDirBusy` names the holder's pid and start."""
    key = str(output_dir)
    if key in _HELD:
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    handle = open(output_dir / lock_file(node_rank), "a+", encoding="utf-8")  # noqa: SIM115 — held open
    _locked(handle, key)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {_dt.datetime.now().isoformat(timespec='seconds')}\n")
    handle.flush()
    _HELD[key] = handle


def check_not_locked(output_dir: Path, node_rank: int = 0) -> None:
    """Refuse a folder another process's run holds (for ``node_rank``), without taking the
    lock or writing anything: the plan's check; the launch takes the lock itself."""
    if str(output_dir) in _HELD:
        return  # this process's own run: lock_output_dir takes it again
    try:
        handle = open(output_dir / lock_file(node_rank), encoding="utf-8")  # noqa: SIM115 — closed below
    except FileNotFoundError:
        return  # no run ever locked it
    # Read-only is enough for flock; closing the file drops the probe's lock.
    _locked(handle, str(output_dir)).close()


def _locked(handle, output_dir: str):
    """``handle`` under its exclusive ``flock``, or (closed) :class:`OutputDirBusy` naming the holder."""
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise OutputDirBusy(f"output_dir={output_dir!r}: another hyport train is running into it ({holder}); "
                            "wait for it to end, or choose another output_dir") from None
    return handle


def release_output_dir(output_dir: Path) -> None:
    """Release this process's lock on ``output_dir`` (nothing when it holds none)."""
    handle = _HELD.pop(str(output_dir), None)
    if handle is not None:
        handle.close()  # closing the descriptor drops the flock


def _run_marker(output_dir: Path) -> dict:
    return read_json_object(output_dir / RUN_MARKER)[0] or {}


def owned_final_files(output_dir: Path) -> set[str]:
    """Names hyport's final saves wrote into ``output_dir`` (from its run marker; for a save
    that did not finish, what was not there before it)."""
    data = _run_marker(output_dir)
    owned = {str(name) for key in ("files", "earlier") for name in data.get(key) or [] if isinstance(name, str)}
    before = data.get("before")
    if isinstance(before, dict) and "files" not in data:  # killed during the final save
        owned |= {name for name, stamp in _listing(output_dir).items() if before.get(name) != stamp}
    return owned


def foreign_entries(output_dir: Path) -> list[str]:
    """Entries of ``output_dir`` hyport did not write (sorted names)."""
    if not output_dir.is_dir():
        return []
    own = set(OWN_NAMES) | owned_final_files(output_dir)
    checkpoints = {c.path.name: c.path for c in list_checkpoints(output_dir)}
    foreign = []
    for entry in output_dir.iterdir():
        if is_own_name(entry.name, own):
            continue
        if entry.name in checkpoints and is_hyport_checkpoint(checkpoints[entry.name]):
            continue
        foreign.append(entry.name)
    return sorted(foreign)


def check_foreign(output_dir: Path, overwrite: bool) -> list[str]:
    """Refuse a folder with files hyport did not write, unless ``overwrite``; the plan's
    notes (what will be overwritten). :class:`ForeignFiles` names up to five entries."""
    foreign = foreign_entries(output_dir)
    if not foreign:
        return []
    named = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if not overwrite:
        raise ForeignFiles(f"output_dir={str(output_dir)!r} holds {len(foreign)} entr"
                           f"{'y' if len(foreign) == 1 else 'ies'} hyport did not write ({named}): they "
                           "could be overwritten or removed; choose an empty or hyport's own folder, or "
                           "overwrite_output_dir=True")
    return [f"overwrite_output_dir=True: {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} hyport did "
            f"not write may be overwritten or removed ({named})"]


def _listing(output_dir: Path) -> dict[str, list[int]]:
    """Each entry's modification time and size: a rewritten file changes one of them (no
    clock is compared, only equality)."""
    listing = {}
    for entry in output_dir.iterdir():
        try:
            st = entry.stat()
        except OSError:
            continue
        listing[entry.name] = [st.st_mtime_ns, st.st_size]
    return listing


def mark_final_save_start(output_dir: Path) -> dict:
    """Before the final save: note the folder's entries (``before``), so that a run killed
    during the save still knows what the save wrote (no clocks involved)."""
    earlier = sorted(owned_final_files(output_dir))
    before = _listing(output_dir)
    atomic_write_json(output_dir / RUN_MARKER, {"before": before, "earlier": earlier})
    return before


def write_run_marker(output_dir: Path, before: dict) -> Path:
    """After the final save: the entries it added or rewrote, with those of earlier hyport
    saves into the same folder."""
    earlier = set(_run_marker(output_dir).get("earlier") or [])
    written = {name for name, stamp in _listing(output_dir).items() if before.get(name) != stamp}
    files = sorted(n for n in written | earlier
                   if not is_own_name(n, set(OWN_NAMES)) and not n.startswith("checkpoint-"))
    return atomic_write_json(output_dir / RUN_MARKER, {"files": files})
