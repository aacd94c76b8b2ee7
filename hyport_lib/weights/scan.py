"""The full scan: every tensor read once, checked for NaN/Inf and checksummed.

Streaming with bounded memory whatever the checkpoint's size, in three threads
(:mod:`.scan_pipeline`): a reader fills a fixed set of buffers (three of ``chunk_bytes``,
2 MiB, by default) with ``readinto``; each filled buffer goes to a hash thread and to the
caller's thread, which counts NaN/Inf, at the same time; a buffer is read into again
only when both are done with it. Reading, checking and hashing overlap, on different
chunks or on the same one (all three release the GIL). Reads follow the file: a chunk
may hold several small tensors, and a tensor larger than a chunk is several chunks, each
cut after whole elements, so results are per tensor whatever the chunk size.

The non-finite test works on the raw bits with numpy, not ``torch.isfinite`` (20-40
times slower on the CPU): a value is NaN or Inf when its exponent field is all ones,
that is when its bits without the sign are at least the exponent mask. Two max
reductions find whether any element is so (the signed view's maximum for the positive
values, the unsigned view's for the negative ones), with no temporary array; only a
chunk that has one is counted element by element. The checksum is XXH3-64 by default
(:mod:`.checksums`: ``crc32`` and ``sha256`` on request); each tensor's record names the
algorithm that made its checksum, and :func:`compare_scans` never calls checksums of two
algorithms a match or a mismatch.

Only what the reader reports about a file (a :class:`.scan_pipeline.ReadFailure`: the
file is missing, unreadable or shorter than its header says) becomes a
``file_unreadable`` finding, naming that file; the scan goes on with the next file and
lists the tensors it could not read in ``skipped``. Any other error, in the hash thread,
in the check or in ``on_progress``, is raised: a scan never returns with a tensor
silently left out.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from hyport_lib.checkpoint_files.findings import Finding, finding
from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry
from hyport_lib.weights.checksums import DEFAULT_CHECKSUM, HASHERS, checksums_agree, new_hasher
from hyport_lib.weights.scan_pipeline import BUFFERS, CHUNK_BYTES, END, Pipeline, ReadFailure

__all__ = ["BUFFERS", "CHUNK_BYTES", "DEFAULT_CHECKSUM", "HASHERS", "ScanComparison", "ScanProgress",
           "ScanResult", "TensorScan", "compare_scans", "full_scan", "nonfinite_counts", "plan_reads"]

#: dtype -> (unsigned view, signed view or None when the format has no sign bit, special
#: mask, mantissa mask or None when the format has no infinity). An element is special
#: (NaN or Inf) when all the bits of the special mask are set: the exponent field for the
#: IEEE formats; S.1111.111 for F8_E4M3 (NaN only); all eight bits for F8_E8M0 (NaN).
_SPECIAL_BITS = {
    "BF16": (np.uint16, np.int16, 0x7F80, 0x007F),
    "F16": (np.uint16, np.int16, 0x7C00, 0x03FF),
    "F32": (np.uint32, np.int32, 0x7F800000, 0x007FFFFF),
    "C64": (np.uint32, np.int32, 0x7F800000, 0x007FFFFF),  # two F32 per element
    "F64": (np.uint64, np.int64, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
    "F8_E5M2": (np.uint8, np.int8, 0x7C, 0x03),
    "F8_E4M3": (np.uint8, np.int8, 0x7F, None),
    "F8_E8M0": (np.uint8, None, 0xFF, None),
}


#: Seconds the hash thread may take, after the caller's thread has finished, for the
#: chunks still queued for it (at most ``buffers`` of them: milliseconds); past that it
#: is stuck and the scan raises rather than return without its checksums.
HASH_JOIN_S = 5.0


@dataclass
class TensorScan:
    """One tensor's scan: its checksum and NaN/Inf counts.

    ``algorithm`` (keyword only, required) names what made ``checksum``: there is no
    default, so a record can never claim an algorithm that did not make it.
    """

    key: str
    file: str
    dtype: str
    nbytes: int
    checksum: str
    nan: int = 0
    inf: int = 0
    algorithm: str = field(kw_only=True)

    def __post_init__(self):
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError(f"TensorScan {self.key!r}: algorithm={self.algorithm!r}, expected the name "
                             f"of the checksum's algorithm")


@dataclass
class ScanProgress:
    """Passed to ``on_progress`` while a scan (or a comparison) reads."""

    phase: str
    done_bytes: int
    total_bytes: int
    tensors_done: int
    tensors_total: int
    file: str
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 1.0


@dataclass
class ScanResult:
    """A full scan; ``checksum`` is the algorithm (a key of :data:`HASHERS`), ``skipped``
    the tensors not scanned (see :func:`full_scan`)."""

    checksum: str
    tensors: dict[str, TensorScan] = field(default_factory=dict)
    bytes_read: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def throughput_gb_s(self) -> Optional[float]:
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else None

    @property
    def nonfinite_tensors(self) -> list[str]:
        return [k for k, t in self.tensors.items() if t.nan or t.inf]


def nonfinite_counts(data, dtype: str) -> tuple[int, int]:
    """``(NaN, Inf)`` counts in raw little-endian bytes of ``dtype`` (0, 0 for integers).

    Raises:
        ValueError: ``data`` is not a whole number of elements.
    """
    spec = _SPECIAL_BITS.get(dtype)
    if spec is None or len(data) == 0:
        return 0, 0
    kind, signed, special, mantissa = spec
    a = np.frombuffer(data, kind)
    if signed is None:
        any_special = a.max() >= special
    else:
        sign = (int(np.iinfo(kind).max) >> 1) + 1
        any_special = a.view(signed).max() >= special or a.max() >= (sign | special)
    if not any_special:
        return 0, 0
    mask = kind(special)
    is_special = (a & mask) == mask
    if mantissa is None:
        return int(np.count_nonzero(is_special)), 0
    inf = int(np.count_nonzero(is_special & ((a & kind(mantissa)) == 0)))
    return int(np.count_nonzero(is_special)) - inf, inf


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


#: What the hash thread puts in the caller's queue when it fails (its error is in
#: :attr:`_HashWorker.error`): wakes a caller waiting for chunks that will not come.
_HASH_FAILED = object()


class _HashWorker:
    """The hash thread: one checksum per tensor from the chunks of its queue.

    Attributes:
        digests: tensor name -> hex digest, for the tensors whose last piece it hashed.
        bytes_done: the tensor bytes hashed so far.
        error: what stopped the thread, when something did (the caller raises it).
    """

    def __init__(self, inbox, algorithm: str, wake):
        self.inbox, self.algorithm, self.wake = inbox, algorithm, wake
        self.digests: dict[str, str] = {}
        self.bytes_done = 0
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="hyport-weights-hash", daemon=True)

    def _run(self) -> None:
        current, hasher = None, None
        try:
            while True:
                chunk = self.inbox.get()
                if chunk is END or isinstance(chunk, BaseException):
                    return  # the reader's end or defect: the caller's thread sees it too
                if isinstance(chunk, ReadFailure):
                    current = None  # the cut tensor's pieces so far make no checksum
                    continue
                for piece in chunk.pieces:
                    if piece.entry is not current:
                        current, hasher = piece.entry, new_hasher(self.algorithm)
                    if piece.length:
                        hasher.update(chunk.view(piece))
                    self.bytes_done += piece.length
                    if piece.last:
                        self.digests[piece.entry.name] = hasher.hexdigest()
                        current = None
                chunk.release()
        except BaseException as exc:  # a defect: kept for the caller's thread, which raises it
            self.error = exc
            self.wake.put(_HASH_FAILED)


def full_scan(shards: list[ShardHeader], *, checksum: str = DEFAULT_CHECKSUM, chunk_bytes: int = CHUNK_BYTES,
              buffers: int = BUFFERS, on_progress: Optional[Callable[[ScanProgress], None]] = None,
              min_interval_s: float = 0.2) -> ScanResult:
    """Read every tensor of ``shards`` once: NaN/Inf counts and a checksum per tensor.

    Args:
        shards: the files' headers (:attr:`Inspection.shards`).
        checksum: a key of :data:`HASHERS` (the stage's ``checksum`` parameter, checked there).
        chunk_bytes: read size, a positive multiple of 8.
        buffers: how many chunks may be in flight; memory stays ``buffers * chunk_bytes``
            (plus, only for a chunk holding NaN/Inf, the temporaries that count them).
        on_progress: called at most every ``min_interval_s`` seconds, and at the end.

    Returns:
        A :class:`ScanResult`; a file that cannot be read (or that ends before its
        header says) is a ``file_unreadable`` finding naming it, the tensors read before
        the error kept and the other files scanned; ``skipped`` lists the tensors not
        scanned: those of a file that failed and not read whole, and those outside their
        file or of the wrong byte length (header findings already).

    Raises:
        ValueError: ``checksum``, ``chunk_bytes`` or ``buffers`` out of range.
        RuntimeError: the hash thread was still running :data:`HASH_JOIN_S` seconds after
            the rest of the scan, or a tensor was checked but not checksummed.
        Exception: whatever the hash thread or ``on_progress`` raised, unchanged (an
            ``OSError`` among them too: only the reader's errors are findings).
    """
    new_hasher(checksum)  # an unknown name fails here, before any thread starts
    started = time.perf_counter()
    plan, skipped = plan_reads(shards)
    result = ScanResult(checksum, skipped=skipped)
    total = sum(e.nbytes for _, entries in plan for e in entries)
    count = sum(len(entries) for _, entries in plan)
    pipeline = Pipeline(plan, consumers=2, chunk_bytes=chunk_bytes, buffers=buffers)
    inbox = pipeline.outputs[1]
    hashing = _HashWorker(pipeline.outputs[0], checksum, wake=inbox)
    counted: dict[str, tuple[ShardHeader, TensorEntry, int, int]] = {}
    last_note = 0.0

    def note(file: str, force: bool = False) -> None:
        nonlocal last_note
        now = time.perf_counter()
        if on_progress and (force or now - last_note >= min_interval_s):
            last_note = now
            done = min(result.bytes_read, hashing.bytes_done)
            on_progress(ScanProgress("scan", done, total, min(len(counted), len(hashing.digests)), count,
                                     file, now - started))

    current, nan, inf, file = None, 0, 0, ""
    pipeline.start()
    hashing.thread.start()
    try:
        while True:
            chunk = inbox.get()
            if chunk is END or chunk is _HASH_FAILED:
                break
            if isinstance(chunk, BaseException):
                raise chunk
            if isinstance(chunk, ReadFailure):  # that file only: the reader goes on with the next
                current, file = None, chunk.shard.label
                result.findings.append(finding("file_unreadable", chunk.shard.label,
                                               f"full scan stopped reading this file: {chunk.error}"))
                result.skipped.extend(chunk.unread)
                continue
            for piece in chunk.pieces:
                if piece.entry is not current:
                    current, nan, inf, file = piece.entry, 0, 0, piece.shard.label
                a, b = nonfinite_counts(chunk.view(piece), piece.entry.dtype)
                nan, inf = nan + a, inf + b
                result.bytes_read += piece.length
                if piece.last:
                    counted[piece.entry.name] = (piece.shard, piece.entry, nan, inf)
                    current = None
            chunk.release()
            note(file)
    finally:
        pipeline.stop()  # also when interrupted: the reader stops at its next buffer
        pipeline.outputs[0].put(END)  # the hash thread stops after what it was given
        hashing.thread.join(timeout=HASH_JOIN_S)
    _check_hashing(hashing, counted)
    for name, (shard, entry, nan, inf) in counted.items():
        result.tensors[name] = TensorScan(name, shard.label, entry.dtype, entry.nbytes, hashing.digests[name],
                                          nan, inf, algorithm=checksum)
    result.seconds = time.perf_counter() - started
    note(file, force=True)
    _nonfinite_findings(result)
    return result


def _check_hashing(hashing: _HashWorker, counted: dict) -> None:
    """Raise unless the hash thread ended cleanly with a checksum for every tensor checked."""
    if hashing.thread.is_alive():
        raise RuntimeError(f"full scan: the hash thread ({hashing.thread.name}) was still running "
                           f"{HASH_JOIN_S:g} s after the last chunk was checked; no result without its checksums")
    if hashing.error is not None:
        raise hashing.error
    unhashed = [name for name in counted if name not in hashing.digests]
    if unhashed:
        raise RuntimeError(f"full scan: {len(unhashed)} tensor(s) checked but never checksummed, "
                           f"first `{unhashed[0]}`")


def _nonfinite_findings(result: ScanResult) -> None:
    by_file: dict[str, list[TensorScan]] = {}
    for t in result.tensors.values():
        if t.nan or t.inf:
            by_file.setdefault(t.file, []).append(t)
    for file, bad in by_file.items():
        shown = ", ".join(f"`{t.key}` ({t.nan} NaN, {t.inf} Inf)" for t in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        result.findings.append(finding("non_finite", file,
                                       f"{len(bad)} tensor(s) hold non-finite values: {shown}{more}",
                                       tensors=[t.key for t in bad]))


@dataclass
class ScanComparison:
    """Two scans' checksums, tensor by tensor (names as saved).

    Attributes:
        same, differ: tensors whose checksums, made by the same algorithm, agree / differ.
        not_comparable: tensors in both whose checksums were made by different algorithms
            (or that lack one): neither a match nor a mismatch.
        only_here, only_there: tensors in one scan only.
    """

    algorithm: str
    other_algorithm: str
    same: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    not_comparable: list[str] = field(default_factory=list)
    only_here: list[str] = field(default_factory=list)
    only_there: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        """True when every tensor the two scans share was judged (``same`` or ``differ``);
        False as soon as one was not. ``same`` and ``differ`` then cover only part of the
        shared tensors, so "nothing differs" says nothing about the others: a partial
        comparison never passes for a whole one."""
        return not self.not_comparable


def compare_scans(scan: ScanResult, other: ScanResult) -> ScanComparison:
    """Compare the per-tensor checksums of two scans (of two folders, or of one at two times)."""
    out = ScanComparison(scan.checksum, other.checksum)
    for key, mine in scan.tensors.items():
        theirs = other.tensors.get(key)
        if theirs is None:
            out.only_here.append(key)
            continue
        agree = checksums_agree(mine.algorithm, mine.checksum, theirs.algorithm, theirs.checksum)
        (out.not_comparable if agree is None else out.same if agree else out.differ).append(key)
    out.only_there = [k for k in other.tensors if k not in scan.tensors]
    return out
