"""Read the logs, match their lines against the catalogue, and gather a :class:`Triage`.

Logs are read line by line (a plog can be large), each line once; only what a finding
shows is kept: its first line in each file, a few lines around the first one, and the
first error lines of a file that nothing in the catalogue explains. Every kept line is
scrubbed of secret values (:func:`hyport_lib.utils.redact.scrub_text`) and cut to
:data:`MAX_LINE_CHARS`.
"""

from __future__ import annotations

import os
import re
from collections import deque
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

from hyport_lib.triage.catalogue import ERROR, recognise
from hyport_lib.triage.discovery import cann_logs, find_logs
from hyport_lib.triage.model import Finding, Place, Triage, Unrecognised
from hyport_lib.utils.redact import scrub_text

#: What makes a line an error line: a traceback, an exception name, an ERROR tag, a CANN
#: error code (EI0002, EZ9999, E39999 ...) or a torch_npu one (ERR00100).
#: Written around the letter E so that a line is searched quickly (a plog has millions).
ERROR_LINE = re.compile(r"E(?:rror\b|RROR\b|RR\d{5}\b|(?<=\bE)[A-Z0-9]\d{4}\b)"
                        r"|Traceback \(most recent call last\)")
#: Lines kept before and after the first line of a finding.
CONTEXT_BEFORE = 2
CONTEXT_AFTER = 3
#: Files listed per finding (a note counts the rest).
MAX_PLACES = 16
#: Error lines kept per file that nothing recognised.
MAX_UNRECOGNISED_LINES = 12
#: Longest line kept; longer ones are cut, with an ellipsis.
MAX_LINE_CHARS = 400
#: Longest line read at once; the rest of a longer line is skipped.
MAX_READ_CHARS = 64 * 1024

Since = Union[None, float, int, datetime]


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a text file, streaming; undecodable bytes replaced.

    A line longer than :data:`MAX_READ_CHARS` yields its beginning only (the rest is read
    past, not kept), so one huge line cannot fill memory.
    """
    with open(path, encoding="utf-8", errors="replace", newline=None) as handle:
        number = 0
        while True:
            chunk = handle.readline(MAX_READ_CHARS)
            if not chunk:
                return
            number += 1
            if not chunk.endswith("\n") and len(chunk) == MAX_READ_CHARS:
                rest = chunk
                while rest and not rest.endswith("\n"):
                    rest = handle.readline(MAX_READ_CHARS)
            yield number, chunk.rstrip("\r\n")


def _since_seconds(since: Since) -> Optional[float]:
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return float(since)
    raise TypeError(f"since={since!r}: expected seconds since the epoch, a datetime, or None")


def _shown(path: Path, root: Optional[Path]) -> str:
    """``path`` relative to ``root`` when inside it, else as given (absolute)."""
    if root is not None:
        try:
            return str(path.resolve().relative_to(root))
        except ValueError:
            pass
    return str(path.resolve())


def _common_root(paths: Sequence[Path]) -> Optional[Path]:
    folders = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    if not folders:
        return None
    try:
        return Path(os.path.commonpath([str(f) for f in folders]))
    except ValueError:  # different drives
        return None


class _Collector:
    """Findings and unrecognised lines as the files are read."""

    def __init__(self, scrub) -> None:
        self.scrub = scrub
        self.findings: dict[str, Finding] = {}
        self.order: list[str] = []
        self.unrecognised: list[Unrecognised] = []

    def keep(self, text: str) -> str:
        text = self.scrub(text)
        return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS - 1] + "…"

    def read(self, path: Path, shown: str) -> None:
        before: deque[str] = deque(maxlen=CONTEXT_BEFORE)
        pending: list[list] = []  # [finding, lines still wanted after its first line]
        in_file: set[str] = set()
        error_lines: list[list] = []
        error_count = 0
        for number, text in read_lines(path):
            for waiting in pending:
                waiting[0].context.append(self.keep(text))
                waiting[1] -= 1
            pending = [w for w in pending if w[1] > 0]
            entry = recognise(text)
            if entry is not None:
                self._found(entry, shown, number, text, before, pending, in_file)
            elif ERROR_LINE.search(text):
                error_count += 1
                if len(error_lines) < MAX_UNRECOGNISED_LINES:
                    error_lines.append([number, self.keep(text)])
            before.append(text)
        # A warning (a CPU fallback) does not explain an error line; a known error does.
        explained = any(self.findings[key].severity == ERROR for key in in_file)
        if error_count and not explained:
            self.unrecognised.append(Unrecognised(file=shown, lines=error_lines, count=error_count))

    def _found(self, entry, shown, number, text, before, pending, in_file) -> None:
        finding = self.findings.get(entry.key)
        if finding is None:
            finding = Finding(key=entry.key, title=entry.title, meaning=entry.meaning,
                              action=entry.action, severity=entry.severity, file=shown, line=number,
                              text=self.keep(text), context=[self.keep(t) for t in before] +
                              [self.keep(text)], places=[Place(shown, number)], occurrences=0,
                              sources=list(entry.sources))
            self.findings[entry.key] = finding
            self.order.append(entry.key)
            pending.append([finding, CONTEXT_AFTER])
        elif entry.key not in in_file:
            if len(finding.places) < MAX_PLACES:
                finding.places.append(Place(shown, number))
            else:
                finding.more_places += 1
        finding.occurrences += 1
        in_file.add(entry.key)

    def ordered(self) -> list[Finding]:
        found = [self.findings[k] for k in self.order]
        return [f for f in found if f.severity == ERROR] + [f for f in found if f.severity != ERROR]


def triage(paths: Iterable[os.PathLike | str], *, cann_log_dir: Optional[os.PathLike | str] = None,
           since: Since = None) -> Triage:
    """What the logs under ``paths`` say went wrong.

    Args:
        paths: run folders, log folders or log files (see :func:`~.discovery.find_logs`).
        cann_log_dir: CANN's log folder to read as well (see :func:`~.discovery.cann_log_dir`);
            a folder that does not exist is noted, not an error (a host without an NPU has none).
        since: read only CANN logs modified at or after this time (seconds since the epoch or
            a datetime); None: all of them. It does not filter ``paths``.

    Returns:
        A :class:`Triage`: findings (the same failure in several files is one finding with
        its places), files with unexplained error lines, the files read, notes.

    Raises:
        FileNotFoundError: a path does not exist (named in the message).
    """
    roots = [Path(p) for p in paths]
    seconds = _since_seconds(since)
    files, notes = [], []
    for root in roots:
        found, more = find_logs(root)
        files.extend(found)
        notes.extend(more)
    cann_dir = Path(cann_log_dir).expanduser() if cann_log_dir is not None else None
    cann_files: list[Path] = []
    if cann_dir is not None:
        cann_files, more = cann_logs(cann_dir, seconds)
        notes.extend(more)
    base = _common_root(roots)
    seen, read = set(), []
    collector = _Collector(_scrubber())
    for path in files + cann_files:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        shown = _shown(path, base)
        try:
            collector.read(path, shown)
        except OSError as exc:
            notes.append(f"{shown}: not read ({exc.strerror or exc})")
            continue
        read.append(shown)
    return Triage(findings=collector.ordered(), unrecognised=collector.unrecognised,
                  files_read=read, root=str(base) if base else None,
                  cann_log_dir=str(cann_dir) if cann_dir is not None else None, since=seconds,
                  notes=[scrub_text(n) for n in notes])


def _scrubber():
    """``scrub_text`` with this process's environment read once for the whole triage."""
    environ = dict(os.environ)
    return lambda text: scrub_text(text, environ)
