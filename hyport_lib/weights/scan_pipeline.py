"""The full scan's read pipeline: one reader thread, a fixed set of buffers.

A reader thread fills buffers of ``chunk_bytes`` with ``readinto`` and hands each filled
buffer to its consumers (the full scan has one: the caller's thread, which checks and
hashes it, :func:`hyport_lib.weights.scan.full_scan`). A buffer goes back to the reader
only when every consumer has released it, so memory is ``buffers x chunk_bytes``
whatever the checkpoint, and the read of the next chunks overlaps the work on this one
(``readinto``, numpy's reductions and the hashers release the GIL).

Reads follow the file, not the tensors: a run of adjacent tensors is read in chunks that
may hold the end of one tensor, several small ones and the start of the next, so small
tensors cost no read of their own. A chunk ends where the tensor it cuts has a
multiple of 8 bytes in it (counted from the tensor's first byte), so every piece holds
whole elements of any dtype up to 8 bytes; a gap or an overlap between tensors (not
written by ``safetensors``, but possible) starts a new run with a seek.

A file that cannot be read to the end (missing, unreadable, or shorter than its header
says: it changed after the headers were read) costs only its own tensors: the reader
sends a :class:`ReadFailure` naming that file and the tensors of it not read whole, then
goes on with the next file. Any other exception in the reader is a defect: it is sent
to the consumers, which raise it.

Small buffers stay in the caches between the read that fills them and the passes that
consume them: three buffers of 2 MiB took less CPU per byte than buffers of 4-16 MiB on
the development VM (docs/weights.md, "Full scan").
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
    """What the reader sends when one file fails (it goes on with the next file).

    Attributes:
        shard: the file that failed.
        error: the ``OSError`` that stopped its reading.
        unread: its tensors whose bytes were not all sent (a consumer drops what it has
            of the one that was cut).
    """

    shard: ShardHeader
    error: OSError
    unread: tuple[str, ...]


@dataclass(frozen=True)
class Piece:
    """The part of one tensor that one chunk holds.

    Attributes:
        shard: the file.
        entry: the tensor.
        start: where the piece begins in the chunk's buffer.
        length: its bytes (whole elements; 0 for a zero-size tensor).
        last: the tensor's last piece (its checksum and counts are complete after it).
    """

    shard: ShardHeader
    entry: TensorEntry
    start: int
    length: int
    last: bool


class Chunk:
    """One filled buffer and the pieces of tensors it holds, shared by the consumers.

    Args:
        buffer: the pipeline's buffer (reused after the last :meth:`release`).
        size: the bytes read into it.
        pieces: the tensors' parts, in file order.
        consumers: how many :meth:`release` calls give the buffer back.
        free: where the buffer goes back to.
    """

    def __init__(self, buffer: bytearray, size: int, pieces: list[Piece], consumers: int,
                 free: queue.SimpleQueue):
        self.buffer, self.size, self.pieces = buffer, size, pieces
        self._pending, self._free = consumers, free
        self._lock = threading.Lock()

    def view(self, piece: Piece) -> memoryview:
        return memoryview(self.buffer)[piece.start: piece.start + piece.length]

    def release(self) -> None:
        """One consumer is done with the buffer; the last one gives it back to the reader."""
        with self._lock:
            self._pending -= 1
            done = self._pending == 0
        if done:
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
    """The reader thread and the buffers; the consumers take :class:`Chunk` objects and
    :class:`ReadFailure` records from :attr:`outputs` (one queue each, all in file order)
    until :data:`END` or an exception (a defect of the reader).

    Args:
        plan: per file, its tensors in offset order (:func:`hyport_lib.weights.scan.plan_reads`).
        consumers: how many consumers share each chunk.
        chunk_bytes: the read size (a positive multiple of 8).
        buffers: how many buffers exist; at most this many chunks are in flight.
    """

    def __init__(self, plan, consumers: int, chunk_bytes: int = CHUNK_BYTES, buffers: int = BUFFERS):
        if chunk_bytes <= 0 or chunk_bytes % 8:
            raise ValueError(f"chunk_bytes={chunk_bytes}: expected a positive multiple of 8")
        if buffers < 1:
            raise ValueError(f"buffers={buffers}: expected at least 1")
        self.plan, self.chunk_bytes, self.buffers = plan, chunk_bytes, buffers
        self.outputs = [queue.SimpleQueue() for _ in range(consumers)]
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

    def _send(self, item) -> None:
        for out in self.outputs:
            out.put(item)

    def _read(self) -> None:
        try:
            for shard, entries in self.plan:
                if entries and not self._read_file(shard, entries):
                    return
            self._send(END)
        except BaseException as exc:  # a defect: handed to every consumer, which raise it
            self._send(exc)

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
                        self._send(Chunk(buffer, end - begin, pieces, len(self.outputs), self._free))
                        sent_whole.update(p.entry.name for p in pieces if p.last)
        except OSError as exc:
            self._send(ReadFailure(shard, exc, tuple(e.name for e in entries if e.name not in sent_whole)))
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
