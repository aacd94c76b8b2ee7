"""Checkpoints a run can safely resume from.

A process killed while the Trainer writes ``checkpoint-N/`` leaves a folder that looks like a
checkpoint and is not one (transformers' ``get_last_checkpoint`` would take it): once every
rank's part is saved, rank 0 adds :data:`MARKER`, and only such a folder is complete. Resuming
names any difference from the run about to start instead of a DeepSpeed traceback mid-load.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.imports import package_version

MARKER = "hyport_checkpoint.json"
#: Written into ``checkpoint-N/`` before the Trainer saves there: the folder is hyport's
#: even when the save is killed before :data:`MARKER` is written.
SAVING_MARKER = "hyport_saving.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
#: Libraries whose versions must match between the run that saved and the one resuming.
VERSIONED = ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "peft")


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
    """Mark a checkpoint complete (rank 0, after the Trainer saved it)."""
    data = {"step": int(step), "world_size": int(world_size), "zero_stage": int(zero_stage),
            "finetuning_type": finetuning_type, "versions": library_versions(),
            **dict(extra or {})}
    return atomic_write_json(Path(checkpoint_dir) / MARKER, data)


def list_checkpoints(output_dir: os.PathLike) -> list[Checkpoint]:
    """Every ``checkpoint-N`` folder of ``output_dir``, oldest first, with completeness."""
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


def read_json_object(path: Path) -> tuple[Optional[dict], str]:
    """``(object, "")`` or ``(None, why it is missing, unreadable or not an object)``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    return (data, "") if isinstance(data, dict) else (None, f"a JSON {type(data).__name__}, not an object")


def _why_incomplete(folder: Path, step: int) -> str:
    """Why ``folder`` cannot be resumed from ("" when it can): its marker, the Trainer's
    state and every rank's ZeRO optimizer states, checked before any process starts."""
    if not (folder / MARKER).is_file():
        return f"no {MARKER} (the save did not finish)"
    marker, why = read_json_object(folder / MARKER)
    if marker is None:
        return f"{MARKER} is unreadable ({why})"
    if not (folder / "trainer_state.json").is_file():
        return "no trainer_state.json"
    state, why = read_json_object(folder / "trainer_state.json")
    if state is None:
        return f"trainer_state.json is unreadable ({why})"
    world, stage = marker.get("world_size"), marker.get("zero_stage")
    states = folder / f"global_step{step}"
    if isinstance(world, int) and isinstance(stage, int) and stage >= 1 and states.is_dir():
        ranks = list(states.glob("*zero_pp_rank_*_optim_states.pt"))
        if len(ranks) < world:
            return (f"{len(ranks)} of {world} ranks' ZeRO optimizer states in {states.name}/ "
                    "(a rank's file is missing)")
    return ""


def newest_complete(output_dir: os.PathLike) -> Optional[Checkpoint]:
    complete = [c for c in list_checkpoints(output_dir) if c.complete]
    return complete[-1] if complete else None


def resolve_resume(resume_from: str, output_dir: os.PathLike) -> Optional[Checkpoint]:
    """The checkpoint to resume from: ``auto`` (newest complete), ``none`` or a folder;
    ValueError when a given folder is not a complete checkpoint (naming what is missing)."""
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
    """Did hyport write this checkpoint folder (either of its markers is there)?"""
    return (Path(folder) / MARKER).is_file() or (Path(folder) / SAVING_MARKER).is_file()


def drop_checkpoints_after(output_dir: os.PathLike, step: int) -> list[str]:
    """Remove hyport's ``checkpoint-N`` folders (never one without its markers) with ``N > step``;
    their names. Left from an earlier run or attempt, the Trainer would write into them over the
    old files, and ``resume_from=auto`` or stage 05 would take them for this run's."""
    import shutil

    dropped = []
    for checkpoint in list_checkpoints(output_dir):
        if checkpoint.step > step and is_hyport_checkpoint(checkpoint.path):
            shutil.rmtree(checkpoint.path, ignore_errors=True)
            dropped.append(checkpoint.path.name)
    return dropped


def check_compatible(checkpoint: Checkpoint, *, world_size: int, zero_stage: int,
                     finetuning_type: str) -> None:
    """Raise ValueError naming every difference between the checkpoint and this run."""
    saved = read_json_object(checkpoint.path / MARKER)[0] or {}
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
