"""How the full scan (:mod:`.scan`) cuts the files into chunks and reads them: per file, its
tensors in offset order (:func:`plan_reads`), runs of tensors stored back to back read in
chunks cut after whole elements (:func:`chunk_layout`), one :class:`Job` per chunk, in file
order (:func:`scan_jobs`). The cuts: docs/weights.md, "Full scan".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Optional

from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry


def plan_reads(shards: list[ShardHeader]) -> tuple[list[tuple[ShardHeader, list[TensorEntry]]], list[str]]:
    """Per file, its readable tensors in offset order; and the keys that cannot be read."""
    plan, skipped = [], []
    for shard in shards:
        if not shard.readable:
            skipped.extend(shard.tensors)
            continue
        entries = sorted(shard.tensors.values(), key=lambda e: (e.begin, e.end))
        ok = [e for e in entries if shard.can_read(e)]
        skipped.extend(e.name for e in entries if not shard.can_read(e))
        plan.append((shard, ok))
    return plan, skipped


@dataclass(frozen=True)
class ReadFailure:
    """One file failed (``error`` stopped its reading); ``unread``: its tensors not read
    whole (what was hashed of the one that was cut is dropped)."""

    shard: ShardHeader
    error: OSError
    unread: tuple[str, ...]


@dataclass(frozen=True)
class Piece:
    """The part of one tensor that one chunk holds: ``start`` in the chunk's buffer,
    ``length`` bytes (whole elements; 0 for a zero-size tensor), ``last``: the tensor's
    last piece."""

    shard: ShardHeader
    entry: TensorEntry
    start: int
    length: int
    last: bool


def runs(entries: list[TensorEntry]) -> list[list[TensorEntry]]:
    """``entries`` (in offset order) cut where a tensor does not begin at the previous end."""
    out: list[list[TensorEntry]] = []
    for entry in entries:
        if out and entry.begin == out[-1][-1].end:
            out[-1].append(entry)
        else:
            out.append([entry])
    return out


def chunk_layout(run: list[TensorEntry], chunk_bytes: int) -> Iterator[tuple[int, int, list[tuple]]]:
    """The reads of one run: ``(first byte, end, [(entry, offset in chunk, length, last)])``,
    offsets relative to the file's data section; the cuts: docs/weights.md, "Full scan"."""
    index, pos, run_end = 0, run[0].begin, run[-1].end
    while True:
        end = min(run_end, pos + chunk_bytes)
        pieces = []
        while index < len(run):
            entry = run[index]
            lo = max(entry.begin, pos)
            if entry.end <= end:  # the tensor ends in this chunk (a zero-size one too)
                pieces.append((entry, lo - pos, entry.end - lo, True))
                index += 1
                continue
            # The chunk cuts this tensor: after a whole number of 8-byte groups of it.
            cut = entry.begin + (end - entry.begin) // 8 * 8
            if cut > lo:
                pieces.append((entry, lo - pos, cut - lo, False))
            end = max(cut, lo)  # lo > pos here unless chunk_bytes < 8: the loop advances
            break
        yield pos, end, pieces
        pos = end
        if index == len(run):
            return


class OpenShard:
    """One file while its chunks are read: the descriptor all workers ``pread`` (one
    readahead state for the file), how far the read-ahead was asked for, and the tensors
    hashed whole so far (what a failure leaves unread)."""

    def __init__(self, shard: ShardHeader, entries: list[TensorEntry], fd: Optional[int]):
        self.shard, self.entries, self.fd = shard, entries, fd
        self.advised_to = 0
        self.failed = False
        self.done: set[str] = set()

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


@dataclass(frozen=True)
class Job:
    """Chunk number ``seq`` of the scan: ``length`` bytes at ``offset`` in the file, with its
    pieces; ``last``: the file's last chunk (its descriptor is closed after it);
    ``open_error``: the file could not be opened (the job reads nothing)."""

    seq: int
    file: OpenShard
    offset: int
    length: int
    pieces: tuple[Piece, ...]
    last: bool
    open_error: Optional[OSError] = None


def scan_jobs(plan, chunk_bytes: int) -> Iterator[Job]:
    """Every chunk of ``plan`` in file order, each file opened when its first chunk is due."""
    seq = 0
    for shard, entries in plan:
        if not entries:
            continue
        try:
            fd = os.open(shard.path, os.O_RDONLY)
        except OSError as exc:
            yield Job(seq, OpenShard(shard, entries, None), 0, 0, (), True, open_error=exc)
            seq += 1
            continue
        file = OpenShard(shard, entries, fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        chunks = [(begin, end, layout) for run in runs(entries) for begin, end, layout in chunk_layout(run, chunk_bytes)]
        for i, (begin, end, layout) in enumerate(chunks):
            yield Job(seq, file, shard.data_start + begin, end - begin, tuple(Piece(shard, *p) for p in layout),
                      i == len(chunks) - 1)
            seq += 1


def pread_exactly(fd: int, view: memoryview, offset: int) -> int:
    """The bytes read into ``view`` from ``offset``: fewer than its length only where the
    file ends."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if not n:
            break
        got += n
    return got


def read_exactly(fh, view: memoryview) -> int:
    """The bytes read into ``view``: fewer than its length only where the file ends."""
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            break
        got += n
    return got
