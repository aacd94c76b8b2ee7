"""Reading log files for triage: lines as ``grep -n`` numbers them, bounded in time and memory.

A line ends at ``\\n`` only (a progress bar's ``\\r`` rewrites are one line, as in an editor),
so the numbers are the ones users look up. A line longer than twice :data:`MAX_READ_BYTES`
keeps its start and end, the middle read past, never held; each side drops the word the cut
went through, so no piece of a token is shown where no redaction can recognise it.
:func:`plan_reading` shares one triage's byte budget among its files.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from hyport_lib.triage.discovery import NAMED_UNREAD, named
from hyport_lib.utils import bounded_files

#: Longest part of a line read at once: a longer line keeps this much of its start and end.
MAX_READ_BYTES = 64 * 1024
#: Bytes one triage reads at most, over all its files (scanning runs at tens of MiB/s).
MAX_BYTES = 512 * 2**20
#: Block size for counting the lines of a part of a file that is skipped.
_COUNT_BLOCK = 1 << 20


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
    """``(line number, text)`` of a regular file (OSError otherwise: a pipe named ``*.log``
    would block forever), streaming, from the first whole line at or after byte ``start``
    (numbers still count from the top), at most ``limit`` bytes (a growing file stays in
    budget); :class:`DeadlinePassed` past ``deadline`` (``time.monotonic()``)."""
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


def _stat(path: Path, field: str) -> float:
    """``path``'s ``st_size`` or ``st_mtime``; 0 when it cannot be had (reading it will say why)."""
    try:
        return getattr(path.stat(), field)
    except OSError:
        return 0


def plan_reading(own: Sequence[Path], cann: Sequence[Path],
                 max_bytes: Optional[int]) -> tuple[list[Planned], list[Path], list[str]]:
    """``(planned, unread, notes)``: which files, and which part of each, fit in ``max_bytes``
    (None: no limit): the run's own logs, then CANN's newest first (its folder holds older
    jobs' files too). A file larger than what is left is read from its end, where a failure is."""
    if max_bytes is None:
        return [Planned(p) for p in [*own, *cann]], [], []
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes={max_bytes!r}: expected a positive number of bytes, or None")
    left = max_bytes
    chosen: dict[Path, Planned] = {}
    unread: list[Path] = []
    notes: list[str] = []
    for path in [*own, *sorted(cann, key=lambda p: _stat(p, "st_mtime"), reverse=True)]:
        size = _stat(path, "st_size")
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
        notes.append(f"byte budget of {max_bytes / 2**20:.0f} MiB spent: {len(unread)} log file(s) "
                     f"not read: {named(unread, NAMED_UNREAD)}")
    return [chosen[p] for p in [*own, *cann] if p in chosen], unread, notes
