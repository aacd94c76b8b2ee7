"""Read the logs, match their lines against the catalogue, and gather a :class:`Triage`.

Only what a finding shows is kept: scrubbed of secrets (values, shapes, private key blocks
across lines), cut to :data:`MAX_LINE_CHARS` around the match and printable, so that
printing a triage never drives the terminal.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from hyport_lib.triage.across_nodes import AcrossNodes, NodeReport, NodeWatch, judge, node_of
from hyport_lib.triage.catalogue import ERROR, recognise
from hyport_lib.triage.log_times import line_time
from hyport_lib.triage.log_files import (MAX_BYTES, NAMED_UNREAD, DeadlinePassed, cann_logs, find_logs,
                                         named, plan_reading, read_lines)
from hyport_lib.triage.result import Finding, Place, Triage, Unrecognised
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import PrivateKeyLines, scrub_secret_shapes, scrub_text
from hyport_lib.utils.wording import counted

#: Bytes of a node log read for the time it began (:func:`_log_began`).
_BEGAN_BYTES = 64 * 1024
#: Seconds one triage reads at most (the byte budget alone does not bound the time: a
#: slow disk, or lines that are costly to match); notes name what was left unread.
MAX_SECONDS = 120.0

#: What makes a line an error line (``docs/triage.md``, "What counts as an error line").
#: Written around the letter E so that a line is searched quickly (a plog has millions).
ERROR_LINE = re.compile(r"E(?:rror\b|RROR\b|RR\d{5}\b|(?<=\bE)[A-Z0-9]\d{4}\b)"
                        r"|Traceback \(most recent call last\)")
#: The first level tag of a line (:func:`is_error_line`): a logger's, a Python warning's
#: class or an exception's name.
_LEVEL_TAG = re.compile(
    r"\[(?P<bracket>[WIDEF]|WARNING|WARN|INFO|DEBUG|EVENT|TRACE|ERROR|FATAL|CRITICAL)[\s\]]"
    r"|\b(?P<word>WARNING|WARN|INFO|DEBUG|EVENT|TRACE|NOTICE|ERROR|FATAL|CRITICAL)\b"
    r"|\b(?P<name>[A-Za-z_]*(?:Warning|Error|Exception))\b|Traceback \(most")
_QUIET_TAGS = frozenset({"W", "I", "D", "WARNING", "WARN", "INFO", "DEBUG", "EVENT", "TRACE", "NOTICE"})
#: Lines kept before and after the first line of a finding.
CONTEXT_BEFORE = 2
CONTEXT_AFTER = 3
#: Files listed per finding (a note counts the rest).
MAX_PLACES = 16
#: Error lines kept per file that nothing recognised.
MAX_UNRECOGNISED_LINES = 12
#: Longest line kept; longer ones are cut around what matched, with ellipses.
MAX_LINE_CHARS = 400
#: Characters kept before the match when a long line is cut around it.
_LEAD = 60

Since = Union[None, float, int, datetime]


#: Error lines that only frame another error and name no cause of their own: a traceback's
#: first line, and what torch_npu prints around any failing ACL or HCCL call (``ERR00100 PTA
#: call acl api failed``, ``HCCL function error: HcclGetRootInfo(&hcclID), error code is 9``).
_FRAME_LINE = re.compile(r"Traceback \(most recent call last\)|\bcall (?:acl|hccl) api failed\b"
                         r"|(?:OPS|HCCL) function error: Hccl\w*(?:\([^)]*\))?, error code is \d+"
                         r"|The Inner error is reported as above")
#: The plain text one of :data:`_FRAME_LINE`'s branches needs (a line without any is no
#: frame, learnt without running the alternation over a long line).
_FRAME_NEEDLES = ("Traceback (most recent call last)", " api failed", " function error: Hccl",
                  "The Inner error is reported as above")


def is_frame_line(line: str) -> bool:
    """Whether an error line only frames another error (:data:`_FRAME_LINE`)."""
    return any(needle in line for needle in _FRAME_NEEDLES) and _FRAME_LINE.search(line) is not None


def is_error_line(line: str) -> bool:
    """Whether ``line`` reports an error: an error mark (:data:`ERROR_LINE`), and its first
    level tag is not a warning's or an information's."""
    if not ERROR_LINE.search(line):
        return False
    tag = _LEVEL_TAG.search(line)
    if tag is None:
        return True
    label = tag.group("bracket") or tag.group("word") or tag.group("name") or ""
    return label not in _QUIET_TAGS and not label.endswith("Warning")


def visible(text: str, at: Optional[int] = None) -> str:
    """What a reader should see of a line: the carriage-return segment that holds position
    ``at`` (a progress bar's last state when ``at`` is None), at most :data:`MAX_LINE_CHARS`
    long and, when cut, cut around ``at``."""
    if "\r" in text:
        if at is None:
            text = next((seg for seg in reversed(text.split("\r")) if seg.strip()), "")
        else:
            begin = text.rfind("\r", 0, at) + 1
            end = text.find("\r", at)
            text, at = text[begin:end if end >= 0 else len(text)], at - begin
    if len(text) <= MAX_LINE_CHARS:
        return text
    if at is None or at + 40 < MAX_LINE_CHARS:
        return text[:MAX_LINE_CHARS - 1] + "…"
    start = at - _LEAD
    return "…" + text[start:start + MAX_LINE_CHARS - 2] + ("…" if start + MAX_LINE_CHARS - 2 < len(text) else "")


def _since_seconds(since: Since) -> Optional[float]:
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return float(since)
    raise TypeError(f"since={since!r}: expected seconds since the epoch, a datetime, or None")


def _shown(path: Path, root: Optional[Path]) -> str:
    """``path`` relative to ``root`` when inside it, else as given (absolute); printable (a
    file name may hold an escape sequence)."""
    if root is not None:
        try:
            return printable(str(path.resolve().relative_to(root)))
        except ValueError:
            pass
    return printable(str(path.resolve()))


def _common_root(paths: Sequence[Path]) -> Optional[Path]:
    folders = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    if not folders:
        return None
    try:
        return Path(os.path.commonpath([str(f) for f in folders]))
    except ValueError:  # different drives
        return None


class _Collector:

    def __init__(self, scrub: Callable[[str], str]) -> None:
        self.scrub = scrub
        self.findings: dict[str, Finding] = {}
        self.order: list[str] = []
        self.unrecognised: list[Unrecognised] = []

    def keep(self, text: str, finder: Optional[Callable[[str], Optional[re.Match]]] = None) -> str:
        """``text`` printable and scrubbed, then cut around what ``finder`` finds in it."""
        # Carriage returns kept: :func:`visible` splits progress bars on them. In file names
        # and notes :func:`printable` shows them (one would move the cursor back over the
        # line printed before it: ``b\rFAKE.log`` shows as ``FAKE.log``).
        text = self.scrub(printable(text, keep="\t\r"))
        match = finder(text) if finder is not None and len(text) > MAX_LINE_CHARS else None
        return visible(text, match.start() if match else None)

    def read(self, path: Path, shown: str, start: int = 0, limit: Optional[int] = None,
             deadline: Optional[float] = None, watch: Optional[NodeWatch] = None) -> Optional[int]:
        """Read one file; the last line read when ``deadline`` stopped it (None: read all).
        ``watch``: the node whose log this is sees each line too."""
        before: deque[str] = deque(maxlen=CONTEXT_BEFORE)
        pending: list[list] = []  # [finding, lines still wanted after its first line]
        in_file: set[str] = set()
        error_lines: list[list] = []  # [line number, text]: every error line
        causal_lines: list[list] = []  # those that may name a cause (not a frame)
        error_count = causal_count = 0
        keys = PrivateKeyLines()  # a key's own lines say nothing of what they are
        stopped = None
        try:
            for number, text in read_lines(path, start, limit, deadline):
                text = keys.scrub(text)
                for waiting in pending:
                    waiting[0].context.append(self.keep(text))
                    waiting[1] -= 1
                pending = [w for w in pending if w[1] > 0]
                entry = recognise(text)
                error = entry is None and is_error_line(text)
                causal = error and not is_frame_line(text)
                if watch is not None:
                    watch.see(number, text, entry, causal)
                if entry is not None:
                    self._found(entry, shown, number, text, before, pending, in_file)
                elif error:
                    error_count += 1
                    causal_count += causal
                    wanting = [kept for kept, wanted in ((error_lines, True), (causal_lines, causal))
                               if wanted and len(kept) < MAX_UNRECOGNISED_LINES]
                    if wanting:
                        line = [number, self.keep(text, ERROR_LINE.search)]  # scrubbed once
                        for kept in wanting:
                            kept.append(line)
                before.append(text)
        except DeadlinePassed as stop:
            stopped = stop.line
        # Which error lines a finding explains: docs/triage.md, "What counts as an error line".
        errors = [self.findings[key] for key in in_file if self.findings[key].severity == ERROR]
        if any(not finding.consequence for finding in errors):
            return stopped
        if errors:
            error_lines, error_count = causal_lines, causal_count
        if error_count:
            self.unrecognised.append(Unrecognised(file=shown, lines=error_lines, count=error_count))
        return stopped

    def _found(self, entry, shown, number, text, before, pending, in_file) -> None:
        finding = self.findings.get(entry.key)
        if finding is None:
            kept = self.keep(text, entry.find)
            finding = Finding(key=entry.key, title=entry.title, meaning=entry.meaning,
                              action=entry.action, severity=entry.severity, file=shown, line=number,
                              text=kept, context=[self.keep(t) for t in before] + [kept],
                              places=[Place(shown, number)], occurrences=0,
                              sources=list(entry.sources), consequence=entry.consequence)
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
        """Causes, then consequences, then warnings."""
        found = [self.findings[k] for k in self.order]
        return sorted(found, key=lambda f: (f.severity != ERROR, f.consequence))


def triage(paths: Iterable[os.PathLike | str], *, cann_log_dir: Optional[os.PathLike | str] = None,
           since: Since = None, environ: Optional[Mapping[str, str]] = None,
           max_bytes: Optional[int] = MAX_BYTES,
           max_seconds: Optional[float] = MAX_SECONDS, nodes_by_path: bool = False) -> Triage:
    """What the logs under ``paths`` (run folders, log folders or files) say went wrong
    (``docs/triage.md``). ``cann_log_dir``'s logs are read from ``since`` on (``paths`` are
    not filtered); ``environ``: the failed job's variables, whose secrets must not appear
    either; ``max_bytes`` / ``max_seconds`` bound all files (None: no bound), and notes name
    what was left unread. Several nodes' logs (``node<k>.log`` files, or each of ``paths``
    when ``nodes_by_path``) are also compared: ``across_nodes``. FileNotFoundError for a
    path that does not exist."""
    deadline = _deadline(max_seconds)
    roots = [Path(p) for p in paths]
    seconds = _since_seconds(since)
    files, notes, by_root = [], [], []
    for root in roots:
        found, more = find_logs(root)
        files.extend(found)
        by_root.append(found)
        notes.extend(more)
    cann_dir = Path(cann_log_dir).expanduser() if cann_log_dir is not None else None
    cann_files: list[Path] = []
    if cann_dir is not None:
        cann_files, more = cann_logs(cann_dir, seconds)
        notes.extend(more)
    own = _unique(files)
    own_keys = {f.resolve() for f in own}
    cann_files = [p for p in _unique(cann_files) if p.resolve() not in own_keys]
    planned, unread, more = plan_reading(own, cann_files, max_bytes)
    notes.extend(more)
    base = _common_root(roots)
    scrub = _scrubber(environ)
    collector = _Collector(scrub)
    node_files, more = _node_files(by_root, nodes_by_path, base)
    notes.extend(more)
    watches = _node_watches(node_files, base, lambda text: collector.keep(text, ERROR_LINE.search))
    for path in unread:
        _cut(watches, path, "not read (past the byte budget)")
    read, failed, left = [], 0, []
    for index, item in enumerate(planned):
        shown = _shown(item.path, base)
        watch = watches.get(item.path.resolve())
        if watch is not None:
            watch.start(shown, _mtime(item.path))
            if item.start > 0:
                _cut(watches, item.path, "read only in part (past the byte budget)")
        try:
            stopped = collector.read(item.path, shown, item.start, item.limit, deadline, watch)
        except OSError as exc:
            notes.append(f"{shown}: not read ({exc.strerror or exc})")
            failed += 1
            if watch is not None:
                watch.report.read = False
            continue
        read.append(shown)
        if stopped is not None:
            notes.append(f"{shown}: read up to line {stopped} only: the time limit of "
                         f"{max_seconds:g} s for one triage was reached")
            _cut(watches, item.path, f"read only up to line {stopped} (past the time limit)")
            for rest in planned[index + 1:]:
                _cut(watches, rest.path, "not read (past the time limit)")
            left = [_shown(p.path, base) for p in planned[index + 1:]]
            break
    if left:
        notes.append(f"time limit of {max_seconds:g} s reached: {counted(len(left), 'log file')} not read: "
                     f"{named(left, NAMED_UNREAD)}")
    return Triage(findings=collector.ordered(), unrecognised=collector.unrecognised,
                  files_read=read, root=printable(str(base)) if base else None,
                  cann_log_dir=printable(str(cann_dir)) if cann_dir is not None else None,
                  since=seconds, notes=[scrub(printable(n)) for n in notes],
                  unread=failed + len(unread) + len(left), across_nodes=_across(watches, read))


def _node_files(by_root: Sequence[Sequence[Path]], by_path: bool,
               base: Optional[Path]) -> tuple[list[tuple[int, list[Path]]], list[str]]:
    """``(node rank, files)`` of each node, and notes: each path given when ``by_path`` (its
    files modified before its ``node<k>.log`` began left out: an earlier launch's rank logs,
    as ``hyport_lib/train/launch.py`` leaves them out), else each ``node<k>.log`` (hyport's
    launcher log of node k). Empty for fewer than two nodes."""
    notes: list[str] = []
    if by_path:
        nodes = []
        for rank, found in enumerate(by_root):
            began = min((t for t in (_log_began(f) for f in found if node_of(f) is not None) if t is not None), default=None)
            older = [f for f in found if began is not None and node_of(f) is None and _mtime(f) < began]
            if older:
                notes.append(f"node {rank}: {counted(len(older), 'log file')} modified before its node log "
                             f"began left out of the comparison of nodes: {named([_shown(f, base) for f in older])}")
            nodes.append((rank, [f for f in found if f not in older]))
    else:
        logs = _unique(f for found in by_root for f in found if node_of(f) is not None)
        nodes = sorted(((node_of(f), [f]) for f in logs), key=lambda n: n[0])
    return (nodes, notes) if len(nodes) > 1 else ([], [])


def _log_began(path: Path) -> Optional[float]:
    """The first time written in a log's first :data:`_BEGAN_BYTES` bytes, or None."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_BEGAN_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    mtime = _mtime(path)
    return next((t for t in (line_time(line, mtime) for line in head.splitlines()) if t is not None), None)


def _cut(watches: dict[Path, NodeWatch], path: Path, how: str) -> None:
    """The node of ``path``, if any, is said to be cut (the first reason is kept)."""
    watch = watches.get(path.resolve())
    if watch is not None and not watch.report.cut:
        watch.report.cut = how


def _node_watches(nodes: list[tuple[int, list[Path]]], base: Optional[Path],
                  keep: Callable[[str], str]) -> dict[Path, NodeWatch]:
    """A :class:`NodeWatch` per node, by the resolved path of each of its files. Two logs of
    the same node rank (two hosts both started as node 0) are told apart by their folder."""
    ranks = [rank for rank, _ in nodes]
    watches: dict[Path, NodeWatch] = {}
    for rank, files in nodes:
        label = f"node {rank}"
        if ranks.count(rank) > 1 and files:
            label += f" ({_shown(files[0].parent, base)})"
        watch = NodeWatch(NodeReport(node=rank, label=label), keep)
        for path in files:
            watches.setdefault(path.resolve(), watch)
    return watches


def _across(watches: dict[Path, NodeWatch], read: list[str]) -> Optional[AcrossNodes]:
    """The nodes compared; a node none of whose files was read is said to be unread."""
    nodes = list({id(w): w for w in watches.values()}.values())
    if not nodes:
        return None
    reports = [w.finish() for w in nodes]
    for report in reports:
        report.read = report.read and bool(report.files) and all(f in read for f in report.files)
    return judge(reports)


def _mtime(path: Path) -> float:
    """``path``'s modification time; 0 when it cannot be had (reading it will say why)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _deadline(max_seconds: Optional[float]) -> Optional[float]:
    if max_seconds is None:
        return None
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not max_seconds > 0:
        raise ValueError(f"max_seconds={max_seconds!r}: expected a positive number of seconds, or None")
    return time.monotonic() + max_seconds


def _unique(paths: Iterable[Path]) -> list[Path]:
    """The same file reached twice is read once."""
    kept: dict[Path, Path] = {}
    for path in paths:
        kept.setdefault(path.resolve(), path)
    return list(kept.values())


def _scrubber(environ: Optional[Mapping[str, str]]) -> Callable[[str], str]:
    """Scrubbing for the whole triage: the secret values of this process's environment and
    of ``environ`` (a name set in both with different values keeps both), then whatever is
    written like a secret."""
    every = dict(os.environ)
    for name, value in (environ or {}).items():
        every[name if every.get(name, value) == value else f"{name} (given)"] = value
    return lambda text: scrub_secret_shapes(scrub_text(text, every))


def diagnose(paths, *, cann_dir: Optional[Path], since: float,
             environ: Optional[Mapping[str, str]] = None) -> dict:
    """:func:`triage` of a failed worker's logs (``paths`` that exist, CANN logs of
    ``cann_dir`` since ``since``), as ``Triage.to_dict()``. Never raises: a stage calls it
    with its results still to write, so a failure becomes the record's note."""
    existing = [Path(p) for p in paths if p and Path(p).exists()]
    try:
        return triage(existing, cann_log_dir=cann_dir, since=since, environ=environ).to_dict()
    except Exception as exc:  # a diagnosis must never cost the stage its results
        note = f"the logs could not be read for a diagnosis: {type(exc).__name__}: {exc}"
        note = scrub_secret_shapes(scrub_text(printable(note), {**os.environ, **(environ or {})}))
        return Triage(notes=[note]).to_dict()
