"""Which folders the stage checks when none is given: stage 04's hand-over
(:class:`hyport_lib.results.TrainedWeights`: final weights against its last checkpoint and
its starting model), else the embedded tiny model in two shards against the same model in
one file. A stage 04 that trained nothing (its record, or a report run's ``run.json``
listing it) is an error, never the tiny model: that PASS would read as the trained weights';
one that was stopped (INTERRUPTED) makes the stage SKIP, saying what to run or give instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.models.tiny import ensure_tiny_model, tiny_model_dir
from hyport_lib.results import (
    INTERRUPTED, RUN_DIR_ENV, StageRecord, TrainedWeights, load_record, result_file, results_dir,
)

#: The tiny model is about 850 KB in float32: this gives two shards.
TINY_SHARD_SIZE = "500KB"
#: Why stage 05 checks nothing on a node > 0 of a multi-node training.
ON_NODE_0 = "stage 05 runs on node 0 (the job's weights and checkpoints are there)"
_NOT_THE_TINY_MODEL = ("stage 05 does not check the embedded model instead, which would read as the trained "
                       "weights' result: set weights_path to check a folder")


@dataclass
class Sources:
    """The folders to check and where they came from (``note``); ``tiny``: the embedded
    tiny model's cache, made by :func:`build_tiny_sources` when the stage runs."""

    weights: str
    base: Optional[str]
    checkpoint: Optional[str]
    note: str
    tiny: bool = False
    #: Why nothing is checked on this host ("" : checked): stage 04's hand-over here is a
    #: node > 0's, and the job's weights and checkpoints are node 0's.
    skip: str = ""


def _existing(path) -> Optional[str]:
    return str(path) if path and Path(path).exists() else None


def _stage04_record(results: Optional[os.PathLike]) -> tuple[Path, Optional[StageRecord[TrainedWeights]]]:
    """Stage 04's result file, and its record (None: no file, or an unreadable one)."""
    path = result_file(results or results_dir(), TrainedWeights.STAGE)
    if not path.is_file():
        return path, None
    try:
        return path, load_record(path, TrainedWeights)
    except ValueError:
        return path, None


def _stage04_of_this_run() -> Optional[str]:
    """In a report run that includes stage 04, its verdict and summary as the run file
    has them (e.g. ``FAIL: dataset: 2 bad records``); None outside such a run."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return None
    try:
        stages = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8")).get("stages") or []
    except (OSError, ValueError, AttributeError):
        return None
    for stage in stages:
        if isinstance(stage, dict) and stage.get("stage") == TrainedWeights.STAGE:
            summary = str(stage.get("error") or stage.get("summary") or "").strip().splitlines()
            return f"{stage.get('verdict')}" + (f": {summary[0][:200]}" if summary else "")
    return None


def resolve_paths(weights_path: Optional[os.PathLike] = None, base_path: Optional[os.PathLike] = None,
                  checkpoint_path: Optional[os.PathLike] = None, *,
                  results: Optional[os.PathLike] = None) -> Sources:
    """The tiny model's folders are named, not built. A path given wins; with
    ``weights_path`` given nothing else is guessed. ValueError: stage 04 (of this run, or as
    recorded) trained no weights to check. A hand-over of a node > 0 checks nothing
    (``skip`` says why): only node 0 holds the job's weights; nor does one of a stage 04
    that was stopped (``skip`` says at which step, and what to do)."""
    if weights_path:
        return Sources(str(weights_path), _str(base_path), _str(checkpoint_path), "as given")
    record_path, record = _stage04_record(results)
    handed = record.data if record is not None else None
    if handed is not None and handed.node_rank > 0:
        return Sources("", None, None, f"stage 04 of node {handed.node_rank} ({record_path})",
                       skip=f"{ON_NODE_0}: stage 04's record here is node {handed.node_rank}'s of "
                            f"{handed.nnodes} ({record_path})")
    if handed is not None and not handed.final_dir and record.verdict == INTERRUPTED:
        return Sources("", None, None, f"stage 04 ({record_path}): interrupted", skip=_interrupted(handed))
    if handed is not None and not handed.final_dir:
        raise ValueError(f"stage 04 trained no weights to check ({record_path}: {record.verdict}: "
                         f"{record.summary or 'no final weights'}); {_NOT_THE_TINY_MODEL}")
    # Final weights deleted since the record was written fall back to the tiny model, and
    # the note says which.
    final = _existing(handed.final_dir) if handed is not None else None
    in_run = None if final else _stage04_of_this_run()
    if in_run is not None:
        raise ValueError(f"stage 04 of this run trained no weights to check ({in_run}); {_NOT_THE_TINY_MODEL}")
    if final:
        base = _str(base_path) or _existing(handed.model_path)
        if base and Path(base).resolve() == Path(final).resolve():
            base = None
        return Sources(final, base, _str(checkpoint_path) or _existing(handed.last_checkpoint),
                       f"stage 04 of this run ({record_path}): its final weights, last "
                       f"checkpoint and starting model")
    why = (f"no usable stage 04 weights ({record_path} names none that still exist, or cannot be read)"
           if record_path.is_file() else f"no stage 04 result in {record_path.parent}")
    return Sources(str(tiny_model_dir(max_shard_size=TINY_SHARD_SIZE)), _str(base_path),
                   _str(checkpoint_path) or str(tiny_model_dir()),
                   f"{why}: the embedded tiny model saved in shards of {TINY_SHARD_SIZE}, checked "
                   f"against the same model saved as one file", tiny=True)


def _interrupted(handed: TrainedWeights) -> str:
    """Why nothing is checked after a stopped stage 04, and what to do: one line."""
    when = (handed.reason or "").split(" (")[0] or "stopped"
    instead = (f"set weights_path={handed.last_checkpoint!r} to check its last complete checkpoint"
               if handed.last_checkpoint else "set weights_path to a folder to check")
    return (f"stage 04 was interrupted ({when}): it wrote no final weights to check; run stage 04 to the end, "
            f"or {instead}")


def build_tiny_sources(sources: Sources) -> None:
    if sources.tiny:
        ensure_tiny_model(max_shard_size=TINY_SHARD_SIZE)
        ensure_tiny_model()


def checked_label(note: str) -> str:
    """A few words on what was checked, from a :class:`Sources` ``note``: a reader of a
    report must see at once when it was not this run's trained weights."""
    if note.startswith("stage 04"):
        return "stage 04's final weights"
    if note.startswith(("no stage 04", "no usable stage 04")):
        return "the embedded tiny model (no weights from stage 04 in this run)"
    return "the folder given" if note else "the folder given (no note)"


def _str(path) -> Optional[str]:
    return str(path) if path else None
