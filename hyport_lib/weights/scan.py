"""The full scan (:func:`full_scan`): every tensor read once, checked for NaN/Inf and
checksummed (:mod:`.checksums`), in ``buffers x chunk_bytes`` of memory whatever the
checkpoint's size. Why one reader thread, 2 MiB chunks cut at 8-byte groups and the
numpy bit test: docs/weights.md, "Full scan".
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import numpy as np

from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry
from hyport_lib.utils.typed_records import fields_of
from hyport_lib.weights.checksums import DEFAULT_CHECKSUM, new_hasher
from hyport_lib.utils.wording import counted, plural

CHUNK_BYTES = 2 << 20
BUFFERS = 3
#: What the reader sends after its last chunk.
END = object()

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


@dataclass
class TensorScan:
    """``algorithm`` has no default, so a record never claims an algorithm that did not make
    its checksum."""

    file: str
    checksum: str
    nan: int = 0
    inf: int = 0
    algorithm: str = field(kw_only=True)

    def __post_init__(self):
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError(f"TensorScan of {self.file!r}: algorithm={self.algorithm!r}, expected the "
                             f"name of the checksum's algorithm")


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
    """``checksum``: the algorithm (a key of :data:`.checksums.HASHERS`); ``skipped``: the
    tensors not scanned (see :func:`full_scan`)."""

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

    def to_dict(self) -> dict:
        """The record, less the findings (the result's own list holds them)."""
        data = fields_of(self)
        del data["findings"]
        return {**data, "seconds": round(self.seconds, 3), "nonfinite_tensors": self.nonfinite_tensors}


def nonfinite_counts(data, dtype: str) -> tuple[int, int]:
    """``(NaN, Inf)`` counts in raw little-endian bytes of ``dtype`` (0, 0 for integers);
    ValueError when ``data`` is not a whole number of elements."""
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


@dataclass(frozen=True)
class ReadFailure:
    """One file failed (``error`` stopped its reading); ``unread``: its tensors whose bytes
    were not all sent (the consumer drops what it has of the one that was cut)."""

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


class Chunk:
    """One filled buffer and the pieces of tensors it holds, in file order; the buffer goes
    back to ``free`` on :meth:`release`."""

    def __init__(self, buffer: bytearray, pieces: list[Piece], free: queue.SimpleQueue):
        self.buffer, self.pieces, self._free = buffer, pieces, free

    def view(self, piece: Piece) -> memoryview:
        return memoryview(self.buffer)[piece.start: piece.start + piece.length]

    def release(self) -> None:
        self._free.put(self.buffer)


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


class Pipeline:
    """The reader thread and the buffers; the consumer takes :class:`Chunk` objects and
    :class:`ReadFailure` records from :attr:`output` (in file order) until :data:`END` or an
    exception (a defect of the reader). ``plan``: :func:`plan_reads`' first part."""

    def __init__(self, plan, chunk_bytes: int = CHUNK_BYTES, buffers: int = BUFFERS):
        if chunk_bytes <= 0 or chunk_bytes % 8:
            raise ValueError(f"chunk_bytes={chunk_bytes}: expected a positive multiple of 8")
        if buffers < 1:
            raise ValueError(f"buffers={buffers}: expected at least 1")
        self.plan, self.chunk_bytes, self.buffers = plan, chunk_bytes, buffers
        self.output: queue.SimpleQueue = queue.SimpleQueue()
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(buffers):
            self._free.put(bytearray(chunk_bytes))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="hyport-weights-reader", daemon=True)

    def start(self) -> "Pipeline":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._free.put(None)  # wakes a reader waiting for a buffer
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _read(self) -> None:
        try:
            for shard, entries in self.plan:
                if entries and not self._read_file(shard, entries):
                    return
            self.output.put(END)
        except BaseException as exc:  # a defect: handed to the consumer, which raises it
            self.output.put(exc)

    def _read_file(self, shard: ShardHeader, entries: list[TensorEntry]) -> bool:
        """Send the chunks of one file; False when the pipeline was stopped meanwhile. An
        ``OSError`` of this file is sent as a :class:`ReadFailure`, naming this file."""
        sent_whole: set[str] = set()
        try:
            with open(shard.path, "rb", buffering=0) as fh:
                for run in runs(entries):
                    fh.seek(shard.data_start + run[0].begin)
                    for begin, end, layout in chunk_layout(run, self.chunk_bytes):
                        buffer = self._free.get()
                        if buffer is None or self._stop.is_set():
                            return False
                        try:
                            got = read_exactly(fh, memoryview(buffer)[: end - begin])
                            if got < end - begin:
                                inside = next(e.name for e, start, length, _ in layout if start + length > got)
                                raise OSError(f"{shard.label}: the file ended inside `{inside}` (it changed "
                                              f"while being read?)")
                        except OSError:
                            self._free.put(buffer)  # nothing was sent in it: it stays usable
                            raise
                        pieces = [Piece(shard, *p) for p in layout]
                        self.output.put(Chunk(buffer, pieces, self._free))
                        sent_whole.update(p.entry.name for p in pieces if p.last)
        except OSError as exc:
            unread = tuple(e.name for e in entries if e.name not in sent_whole)
            self.output.put(ReadFailure(shard, exc, unread))
        return True


def read_exactly(fh, view: memoryview) -> int:
    """The bytes read into ``view``: fewer than its length only where the file ends."""
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def full_scan(shards: list[ShardHeader], *, checksum: str = DEFAULT_CHECKSUM, chunk_bytes: int = CHUNK_BYTES,
              buffers: int = BUFFERS, on_progress: Optional[Callable[[ScanProgress], None]] = None,
              min_interval_s: float = 0.2) -> ScanResult:
    """``on_progress`` at most every ``min_interval_s`` seconds, and at the end. Memory:
    ``buffers * chunk_bytes``, plus the temporaries that count a chunk holding NaN/Inf.

    A file the reader cannot read (missing, unreadable, shorter than its header says) is a
    ``file_unreadable`` finding and the scan goes on; ``skipped`` lists the tensors not
    scanned: such a file's not read whole, and those outside their file or of the wrong byte
    length (header findings already). Whatever the hasher, the check or ``on_progress``
    raises (an OSError too: only the reader's errors are findings) is raised unchanged once
    the reader stopped: a scan never returns with a tensor silently left out.
    """
    new_hasher(checksum)  # an unknown name fails here, before the reader starts
    started = time.perf_counter()
    plan, skipped = plan_reads(shards)
    result = ScanResult(checksum, skipped=skipped)
    total = sum(e.nbytes for _, entries in plan for e in entries)
    count = sum(len(entries) for _, entries in plan)
    pipeline = Pipeline(plan, chunk_bytes=chunk_bytes, buffers=buffers)
    last_note = 0.0

    def note(file: str, force: bool = False) -> None:
        nonlocal last_note
        now = time.perf_counter()
        if on_progress and (force or now - last_note >= min_interval_s):
            last_note = now
            on_progress(ScanProgress("scan", result.bytes_read, total, len(result.tensors), count,
                                     file, now - started))

    current, hasher, nan, inf, file = None, None, 0, 0, ""
    pipeline.start()
    try:
        while True:
            chunk = pipeline.output.get()
            if chunk is END:
                break
            if isinstance(chunk, BaseException):
                raise chunk
            if isinstance(chunk, ReadFailure):  # that file only: the reader goes on with the next
                current, file = None, chunk.shard.label
                result.findings.append(Finding("file_unreadable", chunk.shard.label,
                                               f"full scan stopped reading this file: {chunk.error}"))
                result.skipped.extend(chunk.unread)
                continue
            for piece in chunk.pieces:
                if piece.entry is not current:
                    current, hasher, nan, inf, file = piece.entry, new_hasher(checksum), 0, 0, piece.shard.label
                view = chunk.view(piece)
                a, b = nonfinite_counts(view, piece.entry.dtype)
                nan, inf = nan + a, inf + b
                if piece.length:
                    hasher.update(view)
                result.bytes_read += piece.length
                if piece.last:
                    entry = piece.entry
                    result.tensors[entry.name] = TensorScan(file, hasher.hexdigest(), nan, inf,
                                                            algorithm=checksum)
                    current = None
            chunk.release()
            note(file)
    finally:
        pipeline.stop()  # also when interrupted or raising: the reader stops at its next buffer
    result.seconds = time.perf_counter() - started
    note(file, force=True)
    _nonfinite_findings(result)
    return result


def _nonfinite_findings(result: ScanResult) -> None:
    by_file: dict[str, list[str]] = {}
    for key in result.nonfinite_tensors:
        by_file.setdefault(result.tensors[key].file, []).append(key)
    for file, bad in by_file.items():
        shown = ", ".join(f"`{k}` ({result.tensors[k].nan} NaN, {result.tensors[k].inf} Inf)" for k in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        result.findings.append(Finding("non_finite", file,
                                       f"{counted(len(bad), 'tensor')} {plural('holds', len(bad), 'hold')} "
                                       f"non-finite values: {shown}{more}", tensors=bad))
