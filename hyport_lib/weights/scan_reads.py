"""How the full scan (:mod:`.scan`) splits the files into reads: per file, its tensors in
offset order (:func:`plan_reads`); one :class:`ScanJob` per large tensor, or per group of
small tensors stored back to back (:func:`scan_jobs`), largest first. Why: docs/weights.md,
"Full scan".
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from typing import Optional

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


def open_regular_file(shard: ShardHeader) -> int:
    """A read descriptor on ``shard``'s file, which must still be a regular file: one swapped
    for a FIFO since its header was read would block a plain ``open`` until a writer came,
    so it is opened without blocking, checked, then made blocking for the reads."""
    fd = os.open(shard.path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{shard.label} is no longer a regular file (a FIFO, socket or device now): not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(frozen=True)
class ReadFailure:
    """One file failed: ``error``, the first in the file's order; ``unread``: its tensors
    not read whole."""

    shard: ShardHeader
    error: OSError
    unread: tuple[str, ...]


@dataclass(eq=False)
class ScanFile:
    """One file while the workers read it: the descriptor they all ``pread`` (opened at its
    first job, closed after its last), the tensors read whole, and the read errors by offset."""

    shard: ShardHeader
    entries: list[TensorEntry]
    jobs_left: int = 0
    fd: Optional[int] = None
    open_error: Optional[OSError] = None
    done: set[str] = field(default_factory=set)
    errors: dict[int, OSError] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self) -> Optional[int]:
        """The descriptor, opened on first use; None when the file cannot be opened (the
        error is kept)."""
        with self.lock:
            if self.fd is None and self.open_error is None:
                try:
                    self.fd = open_regular_file(self.shard)
                except OSError as exc:
                    self.open_error = exc
            return self.fd

    def release(self) -> None:
        """One job of this file ended: the last one closes it."""
        with self.lock:
            self.jobs_left -= 1
            if self.jobs_left == 0:
                self.close()

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def failure(self) -> Optional[ReadFailure]:
        if self.open_error is None and not self.errors:
            return None
        error = self.open_error or self.errors[min(self.errors)]
        return ReadFailure(self.shard, error, tuple(e.name for e in self.entries if e.name not in self.done))


@dataclass(frozen=True)
class ScanJob:
    """What one worker reads, checks and hashes alone: one tensor (read in chunks), or
    ``entries`` stored back to back that fit one chunk together (one read)."""

    file: ScanFile
    entries: tuple[TensorEntry, ...]

    @property
    def begin(self) -> int:
        return self.entries[0].begin

    @property
    def nbytes(self) -> int:
        return self.entries[-1].end - self.entries[0].begin


def scan_jobs(plan, chunk_bytes: int) -> tuple[list[ScanFile], list[ScanJob]]:
    """The files, and the jobs largest first (ties in file order): the workers end nearly
    together, never one reading the largest tensor alone at the end."""
    files, jobs = [], []
    for shard, entries in plan:
        if not entries:
            continue
        file, first = ScanFile(shard, entries), len(jobs)
        group: list[TensorEntry] = []
        for entry in entries:
            if group and (entry.begin != group[-1].end or entry.end - group[0].begin > chunk_bytes):
                jobs.append(ScanJob(file, tuple(group)))
                group = []
            group.append(entry)
        jobs.append(ScanJob(file, tuple(group)))
        file.jobs_left = len(jobs) - first
        files.append(file)
    jobs.sort(key=lambda job: -job.nbytes)  # stable: equal sizes stay in file order
    return files, jobs


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
