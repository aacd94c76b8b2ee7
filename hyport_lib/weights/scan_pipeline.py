"""The full scan's read pipeline: one reader thread fills a fixed set of buffers with
``readinto`` (which releases the GIL) and hands each to the consumer
(:func:`hyport_lib.weights.scan.full_scan`), which gives it back by :meth:`Chunk.release`:
memory is ``buffers x chunk_bytes`` whatever the checkpoint. Three buffers of 2 MiB took
less CPU per byte than 4-16 MiB ones: they stay in the caches (docs/weights.md, "Full scan").

Reads follow the file, not the tensors: a run of adjacent tensors is read in chunks that
may hold several small tensors, so those cost no read of their own. A chunk ends where
the tensor it cuts has a multiple of 8 bytes in it, so every piece holds whole elements;
a gap or an overlap between tensors (possible, though ``safetensors`` writes none) starts
a new run with a seek. A file that cannot be read to the end (it may have changed since
its header was read) costs only its own tensors (:class:`ReadFailure`).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Iterator

from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry

CHUNK_BYTES = 2 << 20
BUFFERS = 3
#: What the reader sends after its last chunk.
END = object()


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
    """One filled buffer (``size`` bytes read) and the pieces of tensors it holds, in file
    order; the buffer goes back to ``free`` on :meth:`release`."""

    def __init__(self, buffer: bytearray, size: int, pieces: list[Piece], free: queue.SimpleQueue):
        self.buffer, self.size, self.pieces = buffer, size, pieces
        self._free = free

    def view(self, piece: Piece) -> memoryview:
        return memoryview(self.buffer)[piece.start: piece.start + piece.length]

    def release(self) -> None:
        """The consumer is done with the buffer: the reader may fill it again."""
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
    offsets relative to the file's data section; see the module docstring for the cuts."""
    if chunk_bytes <= 0 or chunk_bytes % 8:
        raise ValueError(f"chunk_bytes={chunk_bytes}: expected a positive multiple of 8")
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
    exception (a defect of the reader). ``plan``: per file, its tensors in offset order
    (:func:`hyport_lib.weights.scan.plan_reads`)."""

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
        """Stop the reader (also while it waits for a buffer) and wait for it."""
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
                            _read_exactly(fh, memoryview(buffer)[: end - begin], shard, layout)
                        except OSError:
                            self._free.put(buffer)  # nothing was sent in it: it stays usable
                            raise
                        pieces = [Piece(shard, *p) for p in layout]
                        self.output.put(Chunk(buffer, end - begin, pieces, self._free))
                        sent_whole.update(p.entry.name for p in pieces if p.last)
        except OSError as exc:
            unread = tuple(e.name for e in entries if e.name not in sent_whole)
            self.output.put(ReadFailure(shard, exc, unread))
        return True


def _read_exactly(fh, view: memoryview, shard: ShardHeader, layout: list[tuple]) -> None:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            inside = next((entry.name for entry, start, length, _ in layout if start + length > got),
                          layout[-1][0].name)
            raise OSError(f"{shard.label}: the file ended inside `{inside}` (it changed while being read?)")
        got += n
