"""Reading log files for triage: lines as ``grep -n`` numbers them, bounded in time and memory.

* A line ends at ``\\n`` only. A progress bar rewrites its line with carriage returns
  (tqdm writes ``\\r 10%|#  |`` again and again); those are one line, as in ``grep -n``,
  ``sed -n`` and an editor, so the line numbers triage gives are the ones users look up.
* A line longer than twice :data:`MAX_READ_BYTES` keeps its beginning and its end (an
  exception printed after a long progress bar ends the line it joins); the middle is read
  past, never held: a gigabyte without a line end (a sparse file) costs two reads of memory.
  Each side of the cut drops the word the cut went through, so that no piece of a token
  (the head of ``hf_...``, the tail of a password) is shown where no redaction can know it.
* Only regular files are opened (:func:`hyport_lib.utils.bounded_files.open_regular`), and
  without blocking: a pipe or a socket named ``*.log`` would otherwise wait forever for a writer.
* A deadline (``time.monotonic()``) stops the reading between two reads:
  :class:`DeadlinePassed` says at which line.
* :func:`plan_reading` shares a byte budget among the files of one triage: the run's own
  logs first, then CANN's, newest first; a file that does not fit whole is read from its
  end (where a failure is), the rest are left unread, and notes say which.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from hyport_lib.utils import bounded_files

#: Longest part of a line read at once: a longer line keeps this much of its start and end.
MAX_READ_BYTES = 64 * 1024
#: Bytes one triage reads at most, over all its files (scanning runs at tens of MiB/s).
MAX_BYTES = 512 * 2**20
#: Block size for counting the lines of a part of a file that is skipped.
_COUNT_BLOCK = 1 << 20
#: Files named in a note about what the budget left unread.
_NAMED_UNREAD = 5


#: What ends a word where a long line is cut (a token holds none of them).
_SPACE = re.compile(rb"\s")
#: Shown where the middle of a long line was read past.
CUT = " … "


class DeadlinePassed(Exception):
    """The reading stopped at its deadline; ``line`` is the last line read whole (0: none)."""

    def __init__(self, line: int) -> None:
        super().__init__(f"deadline passed after line {line}")
        self.line = line


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _skip_to(handle, start: int) -> int:
    """Move ``handle`` to the first line that begins at or after byte ``start``; the number of
    lines before it (so that the lines read next keep their numbers)."""
    lines, left = 0, start
    while left > 0:
        block = handle.read(min(_COUNT_BLOCK, left))
        if not block:
            return lines
        lines += block.count(b"\n")
        left -= len(block)
    handle.seek(start - 1)
    if handle.read(1) != b"\n":  # ``start`` falls inside a line: that line is not read,
        lines += 1  # and it is skipped in blocks (a ``readline`` would hold all of it)
        while block := handle.read(_COUNT_BLOCK):
            end = block.find(b"\n")
            if end >= 0:
                handle.seek(end + 1 - len(block), 1)
                break
    return lines


def _head_words(head: bytes) -> bytes:
    """The start of a cut line without the word the cut went through (b"" when the start is
    one word)."""
    last = max(head.rfind(space) for space in (b" ", b"\t", b"\r", b"\v", b"\f"))
    return head[:last + 1] if last >= 0 else b""


def _tail_words(tail: bytes) -> bytes:
    """The end of a cut line without the word the cut went through."""
    first = _SPACE.search(tail)
    return tail[first.end():] if first else b""


def _cut_line(head: bytes, rest: bytearray, whole: bool) -> str:
    """A long line as text: ``head`` (its first read) and ``rest`` (what followed, all of it
    when ``whole``, else its last :data:`MAX_READ_BYTES`), joined by :data:`CUT` when the
    middle was read past."""
    if whole:
        return _decode(head + bytes(rest)).rstrip("\r\n")
    return (_decode(_head_words(head)).rstrip("\r") + CUT
            + _decode(_tail_words(bytes(rest))).rstrip("\r\n"))


def _passed(deadline: Optional[float]) -> bool:
    return deadline is not None and time.monotonic() > deadline


def read_lines(path: Path, start: int = 0, limit: Optional[int] = None,
               deadline: Optional[float] = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a log, streaming; undecodable bytes replaced.

    Args:
        path: a regular file.
        start: byte offset to start from; reading begins with the first whole line at or
            after it, and line numbers still count from the top of the file.
        limit: bytes to read at most (a file that grows while it is read stays in budget).
        deadline: a ``time.monotonic()`` value after which no more is read; None: none.

    Yields:
        1-based line numbers as ``grep -n`` gives them and the text without its line end;
        a line longer than twice :data:`MAX_READ_BYTES` as its start, :data:`CUT` and its
        end, each without the word the cut went through.

    Raises:
        OSError: the file cannot be opened, or is not a regular file
            (:class:`~hyport_lib.utils.bounded_files.UnreadableFile`).
        DeadlinePassed: ``deadline`` passed before the end of what was to be read.
    """
    with bounded_files.open_regular(path) as handle:
        number = _skip_to(handle, start) if start > 0 else 0
        consumed = 0
        while limit is None or consumed < limit:
            if _passed(deadline):
                raise DeadlinePassed(number)
            head = handle.readline(MAX_READ_BYTES)
            if not head:
                return
            consumed += len(head)
            if head.endswith(b"\n"):
                number += 1
                yield number, _decode(head).rstrip("\r\n")
                continue
            # Longer than one read: keep the start and, of the rest, its last read.
            rest, whole, ended = bytearray(), True, False
            while not ended:
                if _passed(deadline):
                    raise DeadlinePassed(number)
                more = handle.readline(MAX_READ_BYTES)
                if not more:
                    break
                consumed += len(more)
                ended = more.endswith(b"\n")
                rest += more
                if len(rest) > MAX_READ_BYTES:
                    del rest[:len(rest) - MAX_READ_BYTES]
                    whole = False
            number += 1
            yield number, _cut_line(head, rest, whole)


@dataclass(frozen=True)
class Planned:
    """One file to read: from byte ``start``, at most ``limit`` bytes."""

    path: Path
    start: int = 0
    limit: Optional[int] = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reading it will say why
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def plan_reading(own: Sequence[Path], cann: Sequence[Path],
                 max_bytes: Optional[int]) -> tuple[list[Planned], list[Path], list[str]]:
    """Which files (and which part of each) fit in ``max_bytes``.

    The run's own logs (``own``, in their order) come first, then CANN's logs newest first:
    CANN's folder holds older jobs' files too. A file larger than what is left is read from
    its end; once the budget is spent, the remaining files are not read.

    Args:
        own: the logs found under the paths given, in reading order.
        cann: CANN log files, in reading order.
        max_bytes: the budget; None: no limit.

    Returns:
        ``(planned, unread, notes)``: the files to read in reading order (``own`` then
        ``cann``), those left unread, and notes naming the files read in part or not at all.
    """
    if max_bytes is None:
        return [Planned(p) for p in [*own, *cann]], [], []
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes={max_bytes!r}: expected a positive number of bytes, or None")
    left = max_bytes
    chosen: dict[Path, Planned] = {}
    unread: list[Path] = []
    notes: list[str] = []
    for path in [*own, *sorted(cann, key=_mtime, reverse=True)]:
        size = _size(path)
        if size <= left:
            chosen[path] = Planned(path, 0, size if size else None)
            left -= size
        elif left > 0:
            chosen[path] = Planned(path, size - left, left)
            notes.append(f"{path}: only its last {left / 2**20:.1f} MiB of {size / 2**20:.1f} MiB "
                         f"were read (byte budget {max_bytes / 2**20:.0f} MiB)")
            left = 0
        else:
            unread.append(path)
    if unread:
        named = ", ".join(str(p) for p in unread[:_NAMED_UNREAD])
        more = f" and {len(unread) - _NAMED_UNREAD} more" if len(unread) > _NAMED_UNREAD else ""
        notes.append(f"byte budget of {max_bytes / 2**20:.0f} MiB spent: {len(unread)} log file(s) "
                     f"not read: {named}{more}")
    return [chosen[p] for p in [*own, *cann] if p in chosen], unread, notes
