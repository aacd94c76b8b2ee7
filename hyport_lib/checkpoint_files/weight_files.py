"""A checkpoint folder's safetensors files, checked before anything reads them: regular
files inside the folder (or its Hugging Face cache's blobs), an index that names file names
only. The proof's kept weights and the memory model both start here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.models.tiny import MARKER_FILE as TINY_MARKER
from hyport_lib.utils.bounded_files import UnreadableFile, check_regular, inside, read_bytes

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
#: An index lists names, not weights: a larger one is not an index.
_INDEX_BYTES = 64 << 20


class UnsafeCheckpoint(ValueError):
    """A checkpoint file hyport will not open; ``str()`` is one line naming it."""


@dataclass(frozen=True)
class CheckpointFiles:
    """A folder's safetensors weights, checked: ``unused`` says why none are read."""

    folder: Path
    shards: tuple[str, ...] = ()
    weight_map: Optional[dict] = None  # tensor name -> shard, from the index; None: one file
    unused: str = ""

    def fingerprint(self) -> list:
        """What changes when the weights do (names, sizes, mtimes): for the proof's cache key."""
        found = []
        for name in (INDEX_FILE, *self.shards) if self.weight_map is not None else self.shards:
            info = os.stat(self.folder / name)
            found.append([name, info.st_size, info.st_mtime_ns])
        return found or [self.unused]


def checkpoint_files(model_path: str) -> CheckpointFiles:
    """Raises :class:`UnsafeCheckpoint` for a weight file that is not a regular file inside
    the folder (a shard name with a path, a link out, a FIFO)."""
    folder = Path(model_path)
    if (folder / TINY_MARKER).is_file():
        return CheckpointFiles(folder, unused="the tiny default's random weights")
    if not folder.is_dir():
        return CheckpointFiles(folder, unused=f"{model_path} is not a local folder")
    if (folder / INDEX_FILE).exists():
        weight_map = _read_index(folder)
        shards = tuple(sorted(set(weight_map.values())))
    elif (folder / SINGLE_FILE).exists():
        weight_map, shards = None, (SINGLE_FILE,)
    else:
        return CheckpointFiles(folder, unused=f"{folder.name} holds no safetensors weights "
                                              f"({SINGLE_FILE} or {INDEX_FILE})")
    for name in shards:
        _check_weight_file(folder, name)
    return CheckpointFiles(folder, shards, weight_map)


def _read_index(folder: Path) -> dict:
    path = folder / INDEX_FILE
    _check_weight_file(folder, INDEX_FILE)  # inside the folder, or its hub cache's blobs
    try:
        raw = json.loads(read_bytes(path, _INDEX_BYTES))
    except UnreadableFile as exc:
        raise UnsafeCheckpoint(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise UnsafeCheckpoint(f"{path}: not JSON ({type(exc).__name__})") from None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise UnsafeCheckpoint(f"{path}: its weight_map is not an object of tensor names to file names")
    for shard in sorted(set(weight_map.values())):
        if shard in ("", ".", "..") or "/" in shard or "\\" in shard or "\0" in shard:
            raise UnsafeCheckpoint(f"{path}: names the shard {shard[:80]!r}, not a file name inside "
                                   f"{folder}; hyport reads no weights from outside the model's folder")
    return weight_map


def _check_weight_file(folder: Path, name: str) -> None:
    path = folder / name
    if not (inside(folder, path) or _hub_blob(folder, path)):
        raise UnsafeCheckpoint(f"{path}: a link out of {folder} (to {os.path.realpath(path)}); "
                               "hyport reads no weights from outside the model's folder")
    try:
        check_regular(path)
    except UnreadableFile as exc:
        raise UnsafeCheckpoint(str(exc)) from None


def _hub_blob(folder: Path, path: Path) -> bool:
    """A Hugging Face cache snapshot (``<repo>/snapshots/<rev>``) links its files to the
    repository's own ``<repo>/blobs``: the checkpoint's files, not a way out of it."""
    real = Path(os.path.realpath(folder))
    return real.parent.name == "snapshots" and inside(real.parent.parent / "blobs", path)
