"""The full scan: every tensor read once, checked for NaN/Inf and checksummed.

Streaming with bounded memory whatever the checkpoint's size: a reader thread fills a
few fixed buffers (``chunk_bytes`` each, 16 MiB by default) with ``readinto`` and the
caller's thread checks and checksums them, so reading and computing overlap (both
release the GIL). Each tensor is read from its own first byte in chunks that are a
multiple of 8 bytes, so every chunk holds whole elements of any dtype up to 8 bytes,
and a tensor larger than a chunk is simply several chunks.

The non-finite test works on the raw bits with numpy (an exponent field of all ones),
not ``torch.isfinite``, which on CPU is 20-40 times slower (docs/weights.md, "Full
scan"). The checksum is CRC-32 by default (zlib, about 4 GB/s: the scan stays close
to the disk's speed) or SHA-256 (about 1.8 GB/s with SHA-NI) when asked.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import numpy as np

from hyport_lib.checkpoint_files.findings import Finding, finding
from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry

CHUNK_BYTES = 16 << 20
_BUFFERS = 3

#: dtype -> (unsigned view, exponent mask, mantissa mask): all-ones exponent = NaN/Inf.
_FLOAT_BITS = {
    "BF16": (np.uint16, 0x7F80, 0x007F),
    "F16": (np.uint16, 0x7C00, 0x03FF),
    "F32": (np.uint32, 0x7F800000, 0x007FFFFF),
    "C64": (np.uint32, 0x7F800000, 0x007FFFFF),  # two F32 per element
    "F64": (np.uint64, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
    "F8_E5M2": (np.uint8, 0x7C, 0x03),
}


@dataclass
class TensorScan:
    key: str
    file: str
    dtype: str
    nbytes: int
    checksum: str
    nan: int = 0
    inf: int = 0


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
    """``(NaN, Inf)`` counts in raw little-endian bytes of ``dtype`` (0, 0 for integers)."""
    if len(data) == 0:
        return 0, 0
    if dtype == "F8_E4M3":  # no infinity; NaN is S.1111.111
        a = np.frombuffer(data, np.uint8)
        return int(np.count_nonzero((a & 0x7F) == 0x7F)), 0
    if dtype == "F8_E8M0":  # exponent only; 0xFF is NaN
        return int(np.count_nonzero(np.frombuffer(data, np.uint8) == 0xFF)), 0
    bits = _FLOAT_BITS.get(dtype)
    if bits is None:
        return 0, 0
    kind, exp, man = bits
    a = np.frombuffer(data, kind)
    ones = np.iinfo(kind).max
    # Fast path: x | ~exp is all ones only where the exponent is all ones.
    if (a | kind(~exp & ones)).max() != ones:
        return 0, 0
    special = (a & kind(exp)) == kind(exp)
    inf = int(np.count_nonzero(special & ((a & kind(man)) == 0)))
    return int(np.count_nonzero(special)) - inf, inf


class _Crc32:
    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


#: The checksums of the full scan, by the name the ``checksum`` parameter takes.
HASHERS = {"crc32": _Crc32, "sha256": hashlib.sha256}


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


def read_chunks(plan, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[ShardHeader, TensorEntry, memoryview, bool]]:
    """Yield ``(file, tensor, chunk, last chunk of the tensor)`` for every planned tensor.

    A zero-size tensor yields one empty chunk. The chunk's buffer is reused once the
    loop body that received it returns. Raises OSError when a file is shorter than
    its header said (it changed under the scan).
    """
    if chunk_bytes <= 0 or chunk_bytes % 8:
        raise ValueError(f"chunk_bytes={chunk_bytes}: expected a positive multiple of 8")
    free: queue.Queue = queue.Queue()
    for _ in range(_BUFFERS):
        free.put(bytearray(chunk_bytes))
    out: queue.Queue = queue.Queue()
    stop = threading.Event()

    def reader():
        try:
            for shard, entries in plan:
                with open(shard.path, "rb", buffering=0) as fh:
                    pos = None
                    for entry in entries:
                        offset = shard.data_start + entry.begin
                        if pos != offset:
                            fh.seek(offset)
                        remaining = entry.nbytes
                        while True:
                            buf = free.get()
                            if buf is None or stop.is_set():
                                return
                            n = min(chunk_bytes, remaining)
                            _read_exactly(fh, memoryview(buf)[:n], shard, entry)
                            remaining -= n
                            out.put((shard, entry, buf, n, remaining == 0))
                            if not remaining:
                                break
                        pos = offset + entry.nbytes
            out.put(None)
        except BaseException as exc:  # handed to the consuming thread, which raises it
            out.put(exc)

    thread = threading.Thread(target=reader, name="hyport-weights-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            shard, entry, buf, n, last = item
            yield shard, entry, memoryview(buf)[:n], last
            free.put(buf)
    finally:
        stop.set()
        free.put(None)  # wake a reader waiting for a buffer
        thread.join(timeout=5)


def _read_exactly(fh, view: memoryview, shard: ShardHeader, entry: TensorEntry) -> None:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise OSError(f"{shard.label}: the file ended inside `{entry.name}` "
                          f"(it changed while being read?)")
        got += n


def full_scan(shards: list[ShardHeader], *, checksum: str = "crc32", chunk_bytes: int = CHUNK_BYTES,
              on_progress: Optional[Callable[[ScanProgress], None]] = None,
              min_interval_s: float = 0.2) -> ScanResult:
    """Read every tensor of ``shards`` once: NaN/Inf counts and a checksum per tensor.

    Args:
        shards: the files' headers (:attr:`Inspection.shards`).
        checksum: a key of :data:`HASHERS` (the stage's ``checksum`` parameter, checked there).
        chunk_bytes: read size; memory stays about ``3 * chunk_bytes`` plus one chunk of
            temporaries, whatever the tensor sizes.
        on_progress: called at most every ``min_interval_s`` seconds, and at the end.

    Returns:
        A :class:`ScanResult`; a file that cannot be read is a ``file_unreadable``
        finding; tensors outside their file or of the wrong byte
        length (header findings already) are listed in ``skipped``.
    """
    new_hasher = HASHERS[checksum]
    started = time.perf_counter()
    plan, skipped = plan_reads(shards)
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

    current, nan, inf, hasher, file = None, 0, 0, None, ""
    chunks = read_chunks(plan, chunk_bytes)
    try:
        for shard, entry, chunk, last in chunks:
            if entry is not current:
                current, nan, inf, hasher, file = entry, 0, 0, new_hasher(), shard.label
            hasher.update(chunk)
            a, b = nonfinite_counts(chunk, entry.dtype)
            nan, inf = nan + a, inf + b
            result.bytes_read += len(chunk)
            if last:
                result.tensors[entry.name] = TensorScan(entry.name, shard.label, entry.dtype,
                                                        entry.nbytes, hasher.hexdigest(), nan, inf)
                current = None
            note(shard.label)
    except OSError as exc:
        result.findings.append(finding("file_unreadable", file or "?", f"full scan stopped: {exc}"))
    finally:
        chunks.close()  # stops the reader thread now, also when interrupted
    result.seconds = time.perf_counter() - started
    note(file, force=True)
    _nonfinite_findings(result)
    return result


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
