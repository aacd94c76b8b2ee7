"""What in ``output_dir`` hyport wrote, and one training run per folder.

**Ownership.** hyport removes or overwrites only what it can prove it wrote:

* its own files (the metrics, the logs, the DeepSpeed config, the bundled smoke set,
  the dataset listing, the run marker, the lock);
* checkpoints carrying one of its markers (``hyport_saving.json``, written before the
  Trainer saves, or ``hyport_checkpoint.json``, written once the save is complete), so a
  checkpoint killed mid-save by hyport is still hyport's;
* the final weights and processor files a finished run listed in ``hyport_run.json``.

Anything else (another tool's ``checkpoint-500``, a model someone saved there) stops
the run before launch, named, unless ``overwrite_output_dir=True`` — and so does
dropping later checkpoints for an older ``resume_from``.

**One run per folder.** The launcher holds an exclusive advisory lock
(``fcntl.flock``) on ``output_dir/.hyport_train.lock`` from the pre-launch checks to
the end of the run; the kernel releases it when the process dies, so a SIGKILL never
leaves a stale lock. The lock file holds the holder's pid and start time, and a second
run is refused with them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

from hyport_lib.training.checkpoints import is_hyport_checkpoint, list_checkpoints

LOCK_FILE = ".hyport_train.lock"
RUN_MARKER = "hyport_run.json"
#: Files and folders every hyport run writes into output_dir (besides checkpoints).
OWN_NAMES = frozenset({LOCK_FILE, RUN_MARKER, "logs", "smoke_data", "metrics.jsonl", "train_result.json",
                       "dataset_problems.jsonl", "hyport_deepspeed.json", ".hyport_test_killed"})

#: Locks this process holds: output_dir -> open lock file.
_HELD: dict[str, object] = {}


class OutputDirBusy(ValueError):
    """Another hyport run holds the output folder."""


class ForeignFiles(ValueError):
    """output_dir holds files hyport did not write (and would overwrite or remove)."""


def lock_output_dir(output_dir: Path) -> None:
    """Take (or keep) this process's exclusive lock on ``output_dir``.

    Raises:
        OutputDirBusy: another process holds it; names its pid and start time.
    """
    import fcntl

    key = str(output_dir)
    if key in _HELD:
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    handle = open(output_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 — held open
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise OutputDirBusy(f"output_dir={key!r}: another hyport train is running into it ({holder}); "
                            "wait for it to end, or choose another output_dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {_dt.datetime.now().isoformat(timespec='seconds')}\n")
    handle.flush()
    _HELD[key] = handle


def release_output_dir(output_dir: Path) -> None:
    """Release this process's lock on ``output_dir`` (nothing when it holds none)."""
    handle = _HELD.pop(str(output_dir), None)
    if handle is not None:
        handle.close()  # closing the descriptor drops the flock


def owned_final_files(output_dir: Path) -> set[str]:
    """Names a finished hyport run wrote into ``output_dir`` (from its run marker)."""
    try:
        data = json.loads((output_dir / RUN_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {str(name) for name in data.get("files", []) if isinstance(name, str)}


def foreign_entries(output_dir: Path) -> list[str]:
    """Entries of ``output_dir`` hyport did not write (sorted names)."""
    if not output_dir.is_dir():
        return []
    own = set(OWN_NAMES) | owned_final_files(output_dir)
    checkpoints = {c.path.name: c.path for c in list_checkpoints(output_dir)}
    foreign = []
    for entry in output_dir.iterdir():
        if entry.name in own:
            continue
        if entry.name in checkpoints and is_hyport_checkpoint(checkpoints[entry.name]):
            continue
        foreign.append(entry.name)
    return sorted(foreign)


def check_foreign(output_dir: Path, overwrite: bool) -> list[str]:
    """Refuse a folder with files hyport did not write, unless ``overwrite``; the plan's
    notes (what will be overwritten).

    Raises:
        ForeignFiles: naming up to five entries and the option that allows it.
    """
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


def write_run_marker(output_dir: Path, since: float) -> Path:
    """After the final save: record the entries the save wrote (changed since ``since``,
    a ``time.time()``: the final weights and processor files) beside those of earlier
    hyport runs into the same folder."""
    from hyport_lib.utils.files import atomic_write_json

    written = {entry.name for entry in output_dir.iterdir()
               if entry.stat().st_mtime >= since - 1 and not entry.name.startswith("checkpoint-")}
    files = sorted((written - set(OWN_NAMES)) | owned_final_files(output_dir))
    return atomic_write_json(output_dir / RUN_MARKER, {"files": files})
