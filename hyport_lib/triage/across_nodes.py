"""Several nodes' logs read together: each node's host, first error and last line, and which
node stopped first (``docs/triage.md``, "Several nodes"). The lines are read once, by the
triage's own reader (:mod:`.scan`), which hands each line of a node's log to a
:class:`NodeWatch`; :func:`judge` then compares the nodes. What is shown is drawn in
:mod:`.result`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Sequence

from hyport_lib.triage.catalogue import ERROR, KnownFailure
from hyport_lib.triage.log_times import line_time
from hyport_lib.utils.wording import plural

#: hyport's launcher log of one node (``hyport_lib/train/launch.py``: ``logs/node{node_rank}.log``),
#: which holds every rank of that node (torchrun's ``--tee 3``).
NODE_LOG = re.compile(r"^node(\d+)\.log$")
#: Nodes whose stops lie closer than this are taken to have stopped together: the hosts'
#: clocks, and times written to the second, are not more exact.
SAME_TIME_S = 2.0
#: What a surviving node prints when another node stopped: gloo's and torch's sockets,
#: torchrun's store and rendezvous (its join timeout: a node waited for one that never came),
#: NCCL's and HCCL's watchdogs (the catalogue's HCCL timeouts and link errors are
#: consequences too). Each is a phrase these libraries print.
ECHOES = ("Connection closed by peer", "Connection reset by peer", "Connection reset", "Broken pipe",
          "Connection was likely closed", "RendezvousConnectionError", "RendezvousClosedError",
          "RendezvousTimeoutError", "Error waiting on exit barrier",
          "Watchdog caught collective operation timeout", "Timed out waiting", "wait timeout after",
          "Getting socket times out")
#: The host a node's log names: torchrun's failure summary (``host : h1``) and its
#: rendezvous node ids (``The node 'h1_4242_0' has ...``).
#: torchrun's failure summary (``host : NAME``) and hyport's rank (``[hyport train rank 0] host: NAME``)
_HOST_LINE = re.compile(r"^\s*(?:\[hyport train rank \d+\]\s*)?host\s*:\s*(?P<host>[\w.\-]{1,253})\s*$")
_RDZV_NODE = re.compile(r"The node '(?P<host>[\w.\-]{1,253}?)_\d+_\d+'")
#: An exception's name and message, the part of an error line a verdict quotes.
_EXCEPTION = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b:?\s?.*")
#: torchrun's prefixes of a rank's lines, left out of a quote.
_RANK_PREFIX = re.compile(r"^(?:\[(?:default)?\d+\]:)?(?:\[rank\d+\]:)?\s*")
#: Longest quote of an error in a verdict.
QUOTE_CHARS = 80
#: An error that the node's normal timed lines follow for longer than this did not stop it
#: (a retried download): a node's stop is its final error episode. Shorter, the lines are
#: those of the node's other ranks and of torchrun's agent while it ends them.
EPISODE_S = 60.0


@dataclass
class NodeError:
    """A node's first error: where, its line (scrubbed, cut), a short ``summary`` to quote,
    when (``time_from``: ``line``, ``later line``, an upper bound from the first time written
    after it, or ``file mtime``), and whether it is an ``echo`` of another node's stop."""

    file: str
    line: int
    text: str
    summary: str
    echo: bool
    key: Optional[str] = None
    time: Optional[float] = None
    time_from: str = "line"


@dataclass
class NodeReport:
    """One node: ``node`` its rank (from ``node<k>.log``, or the position of its path), its
    ``host`` when a log names it, its first error (that of its final error episode, the
    earliest of its files'), and when its last line was written (``ended_from``: ``line`` or
    ``file mtime``; ``last_line``: ``file:line``). ``cut`` says how a limit cut its logs
    (``read only up to line 58386 (past the time limit)``), empty when they were read whole."""

    node: int
    label: str
    files: list[str] = field(default_factory=list)
    host: Optional[str] = None
    first_error: Optional[NodeError] = None
    last_line: str = ""
    ended: Optional[float] = None
    ended_from: str = "line"
    read: bool = True
    cut: str = ""

    @property
    def name(self) -> str:
        return f"{self.label} (host {self.host})" if self.host else self.label


@dataclass
class AcrossNodes:
    """The nodes compared: ``first_stopped`` names the node that stopped first (its label),
    None when the logs do not tell; ``verdict`` says which and why, or why none."""

    nodes: list[NodeReport] = field(default_factory=list)
    first_stopped: Optional[str] = None
    verdict: str = ""


def node_of(path: Path) -> Optional[int]:
    """The node rank of hyport's launcher log ``node<k>.log``, else None."""
    match = NODE_LOG.match(path.name)
    return int(match.group(1)) if match else None


class NodeWatch:
    """Sees each line of one node's logs, file by file (:meth:`start`), each line once
    (:meth:`see`), and fills the node's :class:`NodeReport` (:meth:`finish`). ``keep``
    scrubs and cuts a line that is kept. A line's time is read only where it is needed: at
    an error, after one (until :data:`EPISODE_S` of normal lines end its episode), and at
    the file's last line."""

    def __init__(self, report: NodeReport, keep: Callable[[str], str]) -> None:
        self.report = report
        self.keep = keep
        self.shown = ""
        self.mtime = 0.0
        self.last = (0, "")  # the last non-blank line: its number and text
        self.error: Optional[NodeError] = None  # the first error of this file's open episode
        self.after_error: Optional[float] = None  # the earliest time written after it

    def start(self, shown: str, mtime: float) -> None:
        """A file of the node begins (its lines' year comes from its modification time)."""
        self._close()
        self.shown, self.mtime = shown, mtime
        self.last, self.error, self.after_error = (0, ""), None, None
        self.report.files.append(shown)

    def see(self, number: int, text: str, entry: Optional[KnownFailure], error: bool) -> None:
        """One line: ``entry`` what the catalogue recognised in it, ``error`` whether it is an
        error line that may name a cause (not a traceback's first line)."""
        if not text.strip():
            return
        self.last = (number, text)
        if self.report.host is None and ("host" in text or "The node '" in text):
            found = _HOST_LINE.match(_RANK_PREFIX.sub("", text)) or _RDZV_NODE.search(text)
            self.report.host = found.group("host") if found else None
        erring = error or (entry is not None and entry.severity == ERROR)
        if self.error is not None:
            stamp = self._time(text)
            if stamp is not None:
                if self.error.time is None:
                    self.after_error = stamp if self.after_error is None else min(self.after_error, stamp)
                began = self.error.time if self.error.time is not None else self.after_error
                if not erring and entry is None and stamp - began > EPISODE_S:
                    self.error, self.after_error = None, None  # the node went on: not its stop
        if self.error is None and erring:
            self.error = _error(self.shown, number, self.keep(text), entry, self._time(text))

    def finish(self) -> NodeReport:
        """The node's files were read: times that no line gave come from its files."""
        self._close()
        self.shown = ""
        return self.report

    def _time(self, text: str) -> Optional[float]:
        return line_time(text, self.mtime) if self.mtime else None

    def _close(self) -> None:
        """The file read last, into the report: its end, and its first error when that is the
        node's earliest."""
        if not self.shown:
            return
        report = self.report
        number, text = self.last
        stamp = self._time(text)
        end, source = (stamp, "line") if stamp is not None else (self.mtime or None, "file mtime")
        if end is not None and (report.ended is None or end > report.ended):
            report.ended, report.ended_from, report.last_line = end, source, f"{self.shown}:{number}"
        error = self.error
        if error is None:
            return
        if error.time is None:
            error.time, error.time_from = ((self.after_error, "later line") if self.after_error is not None
                                           else (self.mtime or None, "file mtime"))
        first = report.first_error
        if first is None or (error.time is not None and (first.time is None or error.time < first.time)):
            report.first_error = error


def _error(shown: str, number: int, text: str, entry: Optional[KnownFailure],
           stamp: Optional[float]) -> NodeError:
    echo_phrase = next((phrase for phrase in ECHOES if phrase in text), None)
    echo = echo_phrase is not None or (entry is not None and entry.consequence)
    if echo_phrase is not None:
        summary = echo_phrase
    elif entry is not None:
        summary = entry.title
    else:
        found = _EXCEPTION.search(text)
        summary = (found.group() if found else _RANK_PREFIX.sub("", text)).strip()
    if len(summary) > QUOTE_CHARS:
        summary = summary[:QUOTE_CHARS - 1] + "…"
    return NodeError(file=shown, line=number, text=text, summary=summary, echo=echo,
                     key=entry.key if entry is not None else None, time=stamp)


def clock(seconds: float) -> str:
    """``12:00:03`` in this host's zone."""
    return datetime.fromtimestamp(seconds).strftime("%H:%M:%S")


def _gap(seconds: float) -> str:
    return "less than 1 s" if seconds < 1 else f"{seconds:.0f} s"


def _bound(time_from: str) -> str:
    """How a time not written on its own line was had."""
    return {"line": "", "later line": " (the time of a later line)", "file mtime": " (file mtime)"}[time_from]


@dataclass
class _Stop:
    """One node's evidence: ``kind`` ``error`` (a cause), ``end`` (its log ends, no error)
    or ``echo``; ``at`` when."""

    report: NodeReport
    kind: str
    at: float

    def said(self) -> str:
        """``its log ends at 12:00:03`` / ``its first error 'X' at 12:00:03``."""
        if self.kind == "end":
            return f"its log ends at {clock(self.at)}{_bound(self.report.ended_from)}"
        first = self.report.first_error
        return f"its first error '{first.summary}' at {clock(self.at)}{_bound(first.time_from)}"

    def other(self) -> str:
        """``node 0's first error 'X' (an echo)`` / ``node 2's log ends``."""
        if self.kind == "end":
            return f"{self.report.label}'s log ends"
        first = self.report.first_error
        return f"{self.report.label}'s first error '{first.summary}' ({'an echo' if first.echo else 'a cause'})"


def _stop(report: NodeReport) -> Optional[_Stop]:
    first = report.first_error
    if first is None:
        return _Stop(report, "end", report.ended) if report.ended is not None else None
    if first.time is None:
        return None
    return _Stop(report, "echo" if first.echo else "error", first.time)


def joined(labels: Sequence[str]) -> str:
    """``node 0``, ``node 0 and node 1``, ``node 0, node 1 and node 2``."""
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def _unread(nodes: Sequence[NodeReport]) -> list[str]:
    """What limits or errors left unread, by why: ``node 1's log was read only up to line
    58386 (past the time limit)``, ``the logs of node 0 and node 1 were not read (past the
    byte budget)``."""
    by_reason: dict[str, list[str]] = {}
    for report in nodes:
        reason = report.cut or ("" if report.read else "could not be read")
        if reason:
            by_reason.setdefault(reason, []).append(report.label)
    said = []
    for reason, labels in by_reason.items():
        logs = f"{labels[0]}'s log" if len(labels) == 1 else f"the logs of {joined(labels)}"
        verb = "" if reason.startswith("could") else plural("was", len(labels), "were") + " "
        said.append(f"{logs} {verb}{reason}")
    return said


def judge(reports: Sequence[NodeReport]) -> AcrossNodes:
    """Which node stopped first. A node that errs first with a cause, or whose log ends with no
    error, may have; a node whose first error is an echo (a peer's connection closed, a
    collective timed out) survived another's stop. The earliest candidate is named when it
    stopped at least :data:`SAME_TIME_S` before every other candidate and no later than that
    after the first echo, and, when its log only ends (a silent node), when no other node
    errs with a cause; otherwise, or when a log was cut or not read, no node is named and
    the verdict says why."""
    nodes = list(reports)
    result = AcrossNodes(nodes=nodes)
    unread = _unread(nodes)
    if unread:
        result.verdict = f"no node named: {'; '.join(unread)}"
        return result
    stops = [_stop(r) for r in nodes]
    untimed = [r.label for r, s in zip(nodes, stops) if s is None]
    if untimed:
        result.verdict = f"no node named: no time could be had for {joined(untimed)}"
        return result
    if all(r.first_error is None for r in nodes):
        ends = sorted(s.at for s in stops)
        span = (f"at {clock(ends[0])}" if clock(ends[0]) == clock(ends[-1])
                else f"between {clock(ends[0])} and {clock(ends[-1])}")
        result.verdict = f"no node named: no node's log shows an error (their logs end {span})"
        return result
    candidates = sorted((s for s in stops if s.kind != "echo"), key=lambda s: s.at)
    echoes = sorted((s for s in stops if s.kind == "echo"), key=lambda s: s.at)
    if not candidates:
        result.verdict = ("no node named: every node's first error is an echo of another's stop ("
                          + "; ".join(f"{s.report.label} '{s.report.first_error.summary}' at {clock(s.at)}"
                                      for s in echoes)
                          + "): the node that stopped first is not among these logs, or its log was cut")
        return result
    first = candidates[0]
    together = [s for s in candidates[1:] if s.at - first.at < SAME_TIME_S]
    if together:
        result.verdict = (f"no node named: {joined([s.report.label for s in [first, *together]])} stopped "
                          f"within {SAME_TIME_S:g} s of each other "
                          f"({'; '.join(f'{s.report.label}: {s.said()}' for s in [first, *together])})")
        return result
    if echoes and first.at - echoes[0].at >= SAME_TIME_S:
        echo = echoes[0]
        result.verdict = (f"no node named: {echo.other()} at {clock(echo.at)} came "
                          f"{_gap(first.at - echo.at)} before any node stopped ({first.report.label}: "
                          f"{first.said()}); the node it echoes is not among these logs")
        return result
    cause = next((s for s in candidates if s.kind == "error"), None)
    if first.kind == "end" and cause is not None:
        # A node that only stopped writing may have stopped first, or waited silently in a
        # collective after the other's own error: its last write does not tell.
        result.verdict = (f"no node named: {first.report.label} stopped writing without an error and "
                          f"{cause.report.label} errs with a cause ({first.report.label}: {first.said()}; "
                          f"{cause.report.label}: {cause.said()}): either may have stopped first")
        return result
    nxt = min((s for s in stops if s is not first), key=lambda s: s.at)
    gap = nxt.at - first.at
    relation = f"{_gap(gap)} before" if gap >= 0 else f"{_gap(-gap)} after (within {SAME_TIME_S:g} s of)"
    result.first_stopped = first.report.label
    result.verdict = f"{first.report.name} stopped first: {first.said()}, {relation} {nxt.other()}"
    return result
