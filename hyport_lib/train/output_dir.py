"""What in ``output_dir`` hyport wrote, one training run per folder, and the checkpoints a run
can safely resume from.

hyport removes or overwrites only what it can prove it wrote: its own files (:data:`OWN_NAMES`),
checkpoints carrying one of its markers, and the final files a run listed in its run marker.
Anything else stops the run before launch unless ``overwrite_output_dir=True``.

A process killed while the Trainer writes ``checkpoint-N/`` leaves a folder that looks like a
checkpoint and is not one (transformers' ``get_last_checkpoint`` would take it): once every
rank's part is saved, rank 0 adds :data:`CHECKPOINT_MARKER`, and only such a folder is complete. Resuming
names any difference from the run about to start instead of a DeepSpeed traceback mid-load.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.results import CHECKPOINT_MARKER
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.imports import package_version

RUN_MARKER = "hyport_run.json"
#: One JSON line per optimizer step, appended by rank 0 (:mod:`hyport_lib.train.result`).
METRICS_FILE = "metrics.jsonl"
#: What rank 0 writes at the end of a run (read by the launcher).
RESULT_FILE = "train_result.json"
#: Every problem of the records a run skips (skip_bad_records=True), one JSON object a line.
PROBLEMS_FILE = "dataset_problems.jsonl"
#: The run's DeepSpeed JSON (what the Trainer of every rank reads).
DEEPSPEED_FILE = "hyport_deepspeed.json"
#: Where the bundled smoke set is written when no dataset_path is given.
SMOKE_FOLDER = "smoke_data"
#: Each node's exit of a multi-node job (``node<k>.json``, node 0's record reads them).
NODES_FOLDER = "nodes"
#: Files and folders every hyport run writes into output_dir (besides checkpoints).
OWN_NAMES = frozenset({RUN_MARKER, "logs", SMOKE_FOLDER, METRICS_FILE, RESULT_FILE, PROBLEMS_FILE, DEEPSPEED_FILE,
                       NODES_FOLDER})
#: Written into ``checkpoint-N/`` before the Trainer saves there: the folder is hyport's
#: even when the save is killed before :data:`CHECKPOINT_MARKER` is written.
SAVING_MARKER = "hyport_saving.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_RANK_STATES_RE = re.compile(r"zero_pp_rank_(\d+)_")
#: Libraries whose versions must match between the run that saved and the one resuming.
VERSIONED = ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "peft")


def read_json_object(path: Path) -> tuple[Optional[dict], str]:
    """``(object, "")`` or ``(None, why it is missing, unreadable or not an object)``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    return (data, "") if isinstance(data, dict) else (None, f"a JSON {type(data).__name__}, not an object")


# --------------------------------------------------------------------------- one run per folder
def lock_file(node_rank: int = 0) -> str:
    return f".hyport_train.node{int(node_rank)}.lock"


#: Locks this process holds: output_dir -> open lock file.
_HELD: dict[str, object] = {}


class OutputDirBusy(ValueError):
    """Another hyport run holds the output folder."""


class ForeignFiles(ValueError):
    """output_dir holds files hyport did not write (and would overwrite or remove)."""


def lock_output_dir(output_dir: Path, node_rank: int = 0) -> None:
    """Take (or keep) this process's exclusive ``flock`` on ``output_dir`` for ``node_rank`` (the
    nodes of one job may share the folder). The kernel releases it when the process dies: a
    SIGKILL never leaves a stale lock."""
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
    """The plan's check: refuse a folder another process's run holds, without taking the lock
    or writing anything."""
    if str(output_dir) in _HELD:
        return  # this process's own run: lock_output_dir takes it again
    try:
        handle = open(output_dir / lock_file(node_rank), encoding="utf-8")  # noqa: SIM115 — closed below
    except FileNotFoundError:
        return
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
    handle = _HELD.pop(str(output_dir), None)
    if handle is not None:
        handle.close()  # closing the descriptor drops the flock


# --------------------------------------------------------------------------- hyport's own files
def is_own_name(name: str, own: set) -> bool:
    """An own file, a hidden ``.hyport*`` file (locks, write probes, test markers) or the
    temporary file of an atomic write of an own file."""
    if name in own or name.startswith(".hyport"):
        return True
    return name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{n}.") for n in own)


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
    """Entries of ``output_dir`` hyport did not write (sorted)."""
    if not output_dir.is_dir():
        return []
    own = set(OWN_NAMES) | owned_final_files(output_dir)
    checkpoints = {c.path.name: c.path for c in list_checkpoints(output_dir)}
    return sorted(entry.name for entry in output_dir.iterdir()
                  if not is_own_name(entry.name, own)
                  and not (entry.name in checkpoints and is_hyport_checkpoint(checkpoints[entry.name])))


def check_foreign(output_dir: Path, overwrite: bool) -> list[str]:
    """Refuse a folder with files hyport did not write, unless ``overwrite``; the plan's
    notes (what will be overwritten)."""
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
    """Before the final save: note the folder's entries, so that a run killed during the save
    still knows what the save wrote."""
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


# --------------------------------------------------------------------------- checkpoints
@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    complete: bool
    why_incomplete: str = ""


def library_versions() -> dict[str, Optional[str]]:
    return {name: package_version(name.replace("_", "-")) or package_version(name) for name in VERSIONED}


def write_marker(checkpoint_dir: os.PathLike, *, step: int, world_size: int, zero_stage: int,
                 finetuning_type: str, extra: Optional[Mapping] = None) -> Path:
    """Mark a checkpoint complete (rank 0, after every rank saved its part)."""
    data = {"step": int(step), "world_size": int(world_size), "zero_stage": int(zero_stage),
            "finetuning_type": finetuning_type, "versions": library_versions(),
            **dict(extra or {})}
    return atomic_write_json(Path(checkpoint_dir) / CHECKPOINT_MARKER, data)


def list_checkpoints(output_dir: os.PathLike) -> list[Checkpoint]:
    """Every ``checkpoint-N`` folder of ``output_dir``, oldest first."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if not match or not child.is_dir():
            continue
        why = _why_incomplete(child, int(match.group(1)))
        found.append(Checkpoint(child, int(match.group(1)), not why, why))
    return sorted(found, key=lambda c: c.step)


def _why_incomplete(folder: Path, step: int) -> str:
    """Why ``folder`` cannot be resumed from ("" when it can): its marker, the Trainer's
    state and every rank's ZeRO optimizer states, checked before any process starts."""
    if not (folder / CHECKPOINT_MARKER).is_file():
        return f"no {CHECKPOINT_MARKER} (the save did not finish)"
    marker, why = read_json_object(folder / CHECKPOINT_MARKER)
    if marker is None:
        return f"{CHECKPOINT_MARKER} is unreadable ({why})"
    if not (folder / "trainer_state.json").is_file():
        return "no trainer_state.json"
    state, why = read_json_object(folder / "trainer_state.json")
    if state is None:
        return f"trainer_state.json is unreadable ({why})"
    world, stage = marker.get("world_size"), marker.get("zero_stage")
    states = folder / f"global_step{step}"
    if isinstance(world, int) and isinstance(stage, int) and stage >= 1:
        # Every rank's states where they are read: all of them in a shared folder; a node's own
        # ranks in its folder under node-local storage (the marker's "ranks").
        expected = marker.get("ranks")
        expected = set(expected) if isinstance(expected, list) else set(range(world))
        found = {int(m.group(1)) for p in (states.glob("*zero_pp_rank_*_optim_states.pt") if states.is_dir() else ())
                 if (m := _RANK_STATES_RE.search(p.name))}
        if not expected <= found:
            missing = sorted(expected - found)
            return (f"{len(expected & found)} of {len(expected)} ranks' ZeRO optimizer states in {states.name}/ "
                    f"(missing: rank {', '.join(map(str, missing[:8]))}{' ...' if len(missing) > 8 else ''})")
    return ""


def newest_complete(output_dir: os.PathLike) -> Optional[Checkpoint]:
    complete = [c for c in list_checkpoints(output_dir) if c.complete]
    return complete[-1] if complete else None


def resolve_resume(resume_from: str, output_dir: os.PathLike) -> Optional[Checkpoint]:
    """The checkpoint ``resume_from`` names (``auto``: the newest complete one); ValueError
    when a given folder is not a complete checkpoint (naming what is missing)."""
    value = str(resume_from).strip()
    if value.lower() == "none":
        return None
    if value.lower() == "auto":
        return newest_complete(output_dir)
    path = Path(value).expanduser()
    match = _CHECKPOINT_RE.match(path.name)
    if not path.is_dir() or not match:
        raise ValueError(f"resume_from={value!r}: not a checkpoint-N folder")
    checkpoint = next((c for c in list_checkpoints(path.parent) if c.path.name == path.name), None)
    if checkpoint is None or not checkpoint.complete:
        reason = checkpoint.why_incomplete if checkpoint else "not found"
        raise ValueError(f"resume_from={value!r}: incomplete checkpoint ({reason}); use "
                         "resume_from='auto' to take the newest complete one")
    return checkpoint


def is_hyport_checkpoint(folder: os.PathLike) -> bool:
    return (Path(folder) / CHECKPOINT_MARKER).is_file() or (Path(folder) / SAVING_MARKER).is_file()


def drop_checkpoints_after(output_dir: os.PathLike, step: int) -> list[str]:
    """Remove hyport's ``checkpoint-N`` folders (never one without its markers) with ``N > step``;
    their names. Left from an earlier run or attempt, the Trainer would write into them over the
    old files, and ``resume_from=auto`` or stage 05 would take them for this run's."""
    dropped = []
    for checkpoint in list_checkpoints(output_dir):
        if checkpoint.step > step and is_hyport_checkpoint(checkpoint.path):
            shutil.rmtree(checkpoint.path, ignore_errors=True)
            dropped.append(checkpoint.path.name)
    return dropped


def check_compatible(checkpoint: Checkpoint, *, world_size: int, zero_stage: int,
                     finetuning_type: str) -> None:
    """Raise ValueError naming every difference between the checkpoint and this run."""
    saved = read_json_object(checkpoint.path / CHECKPOINT_MARKER)[0] or {}
    problems = []
    if saved.get("world_size") != world_size:
        problems.append(f"world size {saved.get('world_size')} when saved, {world_size} now "
                        "(DeepSpeed's ZeRO states are split per rank: resume with the same "
                        "number of processes)")
    if saved.get("zero_stage") != zero_stage:
        problems.append(f"ZeRO stage {saved.get('zero_stage')} when saved, {zero_stage} now")
    if saved.get("finetuning_type") != finetuning_type:
        problems.append(f"finetuning_type {saved.get('finetuning_type')!r} when saved, "
                        f"{finetuning_type!r} now")
    now = library_versions()
    for name, then in (saved.get("versions") or {}).items():
        if then != now.get(name):
            problems.append(f"{name} {then} when saved, {now.get(name)} now")
    if problems:
        raise ValueError(f"cannot resume from {checkpoint.path}: " + "; ".join(problems))
