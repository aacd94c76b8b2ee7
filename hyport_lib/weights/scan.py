"""The full scan (:func:`full_scan`): every tensor read once, checked for NaN/Inf and
checksummed (:mod:`.checksums`), in ``workers x chunk_bytes`` of memory whatever the
checkpoint's size. Why two workers that each read, check and hash whole tensors alone
(largest first, 1 MiB at a time, the kernel asked to read ahead), and the numpy bit test:
docs/weights.md, "Full scan".
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.checkpoint_files.header import ShardHeader
from hyport_lib.utils.typed_records import fields_of
from hyport_lib.weights.checksums import DEFAULT_CHECKSUM, new_hasher
from hyport_lib.utils.wording import counted, plural
from hyport_lib.weights.scan_reads import ReadFailure, ScanFile, ScanJob, plan_reads, pread_exactly, scan_jobs

CHUNK_BYTES = 1 << 20
WORKERS = 2
#: How far ahead of the chunk being read the kernel is asked to read (``POSIX_FADV_WILLNEED``).
READ_AHEAD_BYTES = 64 << 20
#: The most bytes hashed before the consumer hears of them (progress).
SEND_BYTES = 16 << 20
#: What the pipeline sends after its last chunk.
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


class _ReadError(Exception):
    """A read of a weights file failed (``error``): a finding, unlike any other OSError."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class Pipeline:
    """``workers`` threads, each with one buffer of ``chunk_bytes``, take the jobs of
    :func:`.scan_reads.scan_jobs` (largest first) and, alone on each, ``pread`` it chunk by
    chunk, count each chunk's NaN/Inf and hash it while it is still in the core's cache: no
    hand-off between threads, so two cores are used with nothing to wait for. The kernel is
    asked to read ahead (``POSIX_FADV_WILLNEED``) within the job. The consumer takes from
    :attr:`output` ``(file label, {name: TensorScan}, bytes)`` until :data:`END` or an
    exception (raised there); :meth:`failures` then gives the files that failed.
    ``plan``: :func:`.scan_reads.plan_reads`' first part."""

    def __init__(self, plan, checksum: str = DEFAULT_CHECKSUM, chunk_bytes: int = CHUNK_BYTES,
                 workers: int = WORKERS, read_ahead_bytes: int = READ_AHEAD_BYTES):
        if chunk_bytes <= 0 or chunk_bytes % 8:
            raise ValueError(f"chunk_bytes={chunk_bytes}: expected a positive multiple of 8")
        if workers < 1:
            raise ValueError(f"workers={workers}: expected at least 1")
        new_hasher(checksum)  # an unknown name fails here, before any thread starts
        self.checksum, self.chunk_bytes, self.read_ahead_bytes = checksum, chunk_bytes, read_ahead_bytes
        self.output: queue.SimpleQueue = queue.SimpleQueue()
        self.files, jobs = scan_jobs(plan, chunk_bytes)
        self._jobs, self._jobs_lock = iter(jobs), threading.Lock()
        self._stop = threading.Event()
        self._running = workers
        self._threads = [threading.Thread(target=self._work, args=(bytearray(chunk_bytes),),
                                          name=f"hyport-weights-{i}", daemon=True) for i in range(workers)]

    def start(self) -> "Pipeline":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:  # the last one to leave closes the files
            if thread.is_alive():
                thread.join(timeout=timeout)

    def failures(self) -> list[ReadFailure]:
        """The files that could not be read whole, in file order (after :data:`END`)."""
        return [failure for file in self.files if (failure := file.failure())]

    def _work(self, buffer: bytearray) -> None:
        view = memoryview(buffer)
        try:
            while not self._stop.is_set():
                with self._jobs_lock:
                    job = next(self._jobs, None)
                if job is None:
                    break
                try:
                    fd = job.file.acquire()
                    if fd is not None:
                        self._scan(job, fd, view)
                except _ReadError as exc:  # this job's tensors stay unread; the others go on
                    with job.file.lock:
                        job.file.errors[job.begin] = exc.error
                finally:
                    job.file.release()
        except BaseException as exc:  # a defect (the hasher's, the check's): the consumer raises it
            self._stop.set()
            self.output.put(exc)
        finally:
            with self._jobs_lock:
                self._running -= 1
                if self._running == 0:  # the last worker out: no read can be under way any more
                    for file in self.files:
                        file.close()
                    self.output.put(END)

    def _read(self, job: ScanJob, fd: int, view: memoryview, begin: int) -> None:
        """``view`` filled from ``begin`` (relative to the data); :class:`_ReadError` if not."""
        shard = job.file.shard
        try:
            got = pread_exactly(fd, view, shard.data_start + begin)
            # nothing to read (zero-size tensors): still cut off when past the file's end
            cut = got < len(view) or (not len(view) and os.fstat(fd).st_size < shard.data_start + begin)
        except OSError as exc:
            raise _ReadError(exc) from exc
        if cut:
            inside = next(e.name for e in job.entries if e.end > begin + got or e.end == begin == e.begin)
            raise _ReadError(OSError(f"{shard.label}: the file ended inside `{inside}` (it changed while "
                                     f"being read?)"))

    def _scan(self, job: ScanJob, fd: int, view: memoryview) -> None:
        file, label = job.file, job.file.shard.label
        if len(job.entries) > 1 or job.nbytes <= self.chunk_bytes:  # small tensors: one read
            self._read(job, fd, view[: job.nbytes], job.begin)
            finished = {}
            for entry in job.entries:
                data = view[entry.begin - job.begin: entry.end - job.begin]
                hasher = new_hasher(self.checksum)
                nan, inf = nonfinite_counts(data, entry.dtype)
                if len(data):
                    hasher.update(data)
                finished[entry.name] = TensorScan(label, hasher.hexdigest(), nan, inf, algorithm=self.checksum)
            self._finish(file, finished, job.nbytes)
            return
        (entry,) = job.entries
        hasher, nan, inf, unsent = new_hasher(self.checksum), 0, 0, 0
        advised_to = entry.begin
        for begin in range(entry.begin, entry.end, self.chunk_bytes):
            if self._stop.is_set():
                return
            if begin >= advised_to - self.read_ahead_bytes // 2 and advised_to < entry.end:
                # a hint: the kernel reads on while this thread counts and hashes
                end = min(entry.end, begin + self.read_ahead_bytes)
                _advise_will_need(fd, file.shard.data_start + advised_to, end - advised_to)
                advised_to = end
            chunk = view[: min(self.chunk_bytes, entry.end - begin)]  # whole elements: from the start, x8 bytes
            self._read(job, fd, chunk, begin)
            a, b = nonfinite_counts(chunk, entry.dtype)
            hasher.update(chunk)
            nan, inf, unsent = nan + a, inf + b, unsent + len(chunk)
            if unsent >= SEND_BYTES:  # progress: the consumer hears of the bytes, not of every chunk
                self.output.put((label, {}, unsent))
                unsent = 0
        self._finish(file, {entry.name: TensorScan(label, hasher.hexdigest(), nan, inf, algorithm=self.checksum)},
                     unsent)

    def _finish(self, file: ScanFile, finished: dict[str, TensorScan], nbytes: int) -> None:
        with file.lock:
            file.done.update(finished)
        self.output.put((file.shard.label, finished, nbytes))


def _advise_will_need(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to read ahead; only a hint: where there is no ``posix_fadvise`` (macOS)
    or it fails (a file system that refuses it), the reads come all the same, slower."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    except OSError:
        return  # the read that follows says whatever is wrong with the file


def full_scan(shards: list[ShardHeader], *, checksum: str = DEFAULT_CHECKSUM, chunk_bytes: int = CHUNK_BYTES,
              workers: int = WORKERS, on_progress: Optional[Callable[[ScanProgress], None]] = None,
              min_interval_s: float = 0.2) -> ScanResult:
    """``on_progress`` (on the caller's thread) at most every ``min_interval_s`` seconds, and
    at the end. Memory: ``workers * chunk_bytes``, plus the temporaries that count a chunk
    holding NaN/Inf.

    A file that cannot be read (missing, unreadable, shorter than its header says) is a
    ``file_unreadable`` finding and the scan goes on; ``skipped`` lists the tensors not
    scanned: such a file's not read whole, and those outside their file or of the wrong byte
    length (header findings already). Whatever the hasher, the check or ``on_progress``
    raises (an OSError too: only the reads' errors are findings) is raised unchanged once
    the workers stopped: a scan never returns with a tensor silently left out.
    """
    started = time.perf_counter()
    plan, skipped = plan_reads(shards)
    pipeline = Pipeline(plan, checksum=checksum, chunk_bytes=chunk_bytes, workers=workers)
    result = ScanResult(checksum, skipped=skipped)
    total = sum(e.nbytes for _, entries in plan for e in entries)
    count = sum(len(entries) for _, entries in plan)
    last_note = 0.0

    def note(file: str, force: bool = False) -> None:
        nonlocal last_note
        now = time.perf_counter()
        if on_progress and (force or now - last_note >= min_interval_s):
            last_note = now
            on_progress(ScanProgress("scan", result.bytes_read, total, len(result.tensors), count,
                                     file, now - started))

    file = ""
    pipeline.start()
    try:
        while (item := pipeline.output.get()) is not END:
            if isinstance(item, BaseException):
                raise item
            file, finished, nbytes = item
            result.tensors.update(finished)
            result.bytes_read += nbytes
            note(file)
    finally:
        pipeline.stop()  # also when interrupted or raising: the workers stop at their next chunk
    for failure in pipeline.failures():  # that file only: the others were read all the same
        result.findings.append(Finding("file_unreadable", failure.shard.label,
                                       f"full scan could not read this file whole: {failure.error}"))
        result.skipped.extend(failure.unread)
    # The jobs ran largest first, on two threads: the record lists the tensors in file order.
    in_file_order = [e.name for _, entries in plan for e in entries if e.name in result.tensors]
    result.tensors = {name: result.tensors[name] for name in in_file_order}
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
