"""What a triage found, stored in the stages' JSON results, and how it reads: a table,
Markdown for the report, plain text for a terminal (what was found is computed in :mod:`.scan`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from hyport_lib.triage.across_nodes import AcrossNodes, clock
from hyport_lib.triage.catalogue import ERROR, WARNING
from hyport_lib.utils.typed_records import from_mapping, require_fields
from hyport_lib.utils.wording import counted

#: Places named in a line before "and N more".
PLACES_SHOWN = 4
FRAME_COLUMNS = ("kind", "title", "where", "places", "line", "meaning", "action")


@dataclass
class Place:
    """A file (relative to the triage's root when inside it) and a 1-based line number."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Finding:
    """One known failure, however many files and lines show it: ``file:line`` and ``text`` of
    the first, scrubbed and cut; ``places``: the first line in each file."""

    key: str
    title: str
    meaning: str
    action: str
    severity: str
    file: str
    line: int
    text: str
    context: list[str] = field(default_factory=list)
    places: list[Place] = field(default_factory=list)
    occurrences: int = 1
    more_places: int = 0
    sources: list[str] = field(default_factory=list)
    consequence: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Unrecognised:
    """A file's error lines no entry explains: ``[line number, text]`` of the first ones."""

    file: str
    lines: list[list] = field(default_factory=list)
    count: int = 0


@dataclass
class Triage:
    """What :func:`~hyport_lib.triage.scan.triage` found (``docs/triage.md``, "What a triage
    holds")."""

    findings: list[Finding] = field(default_factory=list)
    unrecognised: list[Unrecognised] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    root: Optional[str] = None
    cann_log_dir: Optional[str] = None
    since: Optional[float] = None
    notes: list[str] = field(default_factory=list)
    unread: int = 0
    across_nodes: Optional[AcrossNodes] = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def unrecognised_count(self) -> int:
        return sum(item.count for item in self.unrecognised)

    @property
    def failed(self) -> bool:
        """A known error, or error lines nothing explains."""
        return bool(self.errors or self.unrecognised)

    def summary_line(self) -> str:
        """The first known error and where, else what is left."""
        unread = (f"; {self.unread} log file{'s' if self.unread != 1 else ''} could not be read"
                  if self.unread else "")
        if self.errors:
            first = self.errors[0]
            more = len(self.findings) - 1
            tail = f"; {more} more finding{'s' if more > 1 else ''}" if more else ""
            if first.consequence and self.unrecognised:  # the cause may be among those lines
                count = self.unrecognised_count
                tail += f"; {count} error line{'s' if count != 1 else ''} not recognised"
            return f"{first.title} ({first.where}){tail}{unread}"
        if not self.files_read:
            return "no log could be read" if self.unread or self.notes else "no log file found"
        parts = []
        if self.unrecognised:
            count = self.unrecognised_count
            parts.append(f"no known failure; {count} error line{'s' if count != 1 else ''} "
                         f"not recognised")
        else:
            parts.append("no error lines")
        if self.warnings:
            parts.append("; ".join(f"warning: {w.title} ({w.where})" for w in self.warnings))
        return "; ".join(parts) + unread

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Triage":
        """A :class:`Triage` from :meth:`to_dict`'s output; ValueError naming a record that
        misses a field."""
        require_fields(cls, data, "triage")
        return from_mapping(cls, data)


def _places(finding) -> str:
    others = [str(p) for p in finding.places[1:PLACES_SHOWN]]
    left = len(finding.places) - 1 - len(others) + finding.more_places
    text = ", ".join(others)
    if left:
        text += f"{', ' if text else ''}{left} more"
    return text


def triage_frame(triage: Triage):
    """One row per finding and one per file with unrecognised error lines."""
    import pandas as pd

    rows = []
    for f in triage.findings:
        rows.append({"kind": f.severity, "title": f.title, "where": f.where,
                     "places": len(f.places) + f.more_places, "line": f.text,
                     "meaning": f.meaning, "action": f.action})
    for item in triage.unrecognised:
        first = item.lines[0] if item.lines else [None, ""]
        rows.append({"kind": "not recognised", "title": f"{counted(item.count, 'error line')}",
                     "where": f"{item.file}:{first[0]}", "places": 1, "line": first[1],
                     "meaning": "", "action": ""})
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def _fence(lines: list[str]) -> list[str]:
    """Lines in a Markdown code block (a line holding a fence cannot close it early)."""
    return ["```text", *[line.replace("```", "'''") for line in lines], "```"]


def triage_markdown(triage: Triage) -> list[str]:
    """Markdown lines for the report."""
    out = [f"**Log triage:** {triage.summary_line()}", ""]
    if triage.across_nodes is not None:
        out += [f"**Nodes:** {triage.across_nodes.verdict}", "",
                "| " + " | ".join(NODE_COLUMNS) + " |", "|" + "---|" * len(NODE_COLUMNS),
                *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in node_rows(triage.across_nodes)), ""]
    for f in triage.findings:
        label = "Warning" if f.severity == "warning" else "Failure"
        others = _places(f)
        out.append(f"**{label}: {f.title}** at `{f.where}`"
                   + (f" (also {others})" if others else ""))
        out += ["", *_fence(f.context or [f.text]), "",
                f"*What it means:* {f.meaning}", "", f"*What to do:* {f.action}", ""]
    if triage.unrecognised:
        out += ["**Not recognised:** error lines that no known failure explains.", ""]
        for item in triage.unrecognised:
            extra = item.count - len(item.lines)
            out.append(f"`{item.file}`" + (f" ({extra} more not shown)" if extra > 0 else ""))
            out += ["", *_fence([f"{number}: {text}" for number, text in item.lines]), ""]
    for note in triage.notes:
        out.append(f"*Note:* {note}")
    if not triage.files_read:
        out.append("*No log file was found to read.*")
    return out


NODE_COLUMNS = ("node", "host", "first error", "at", "where", "last line at")


def _when(seconds: Optional[float], source: str) -> str:
    """``12:00:03``, marked when it was not written on its own line."""
    if seconds is None:
        return "-"
    return clock(seconds) + {"line": "", "later line": " (by a later line)", "file mtime": " (file mtime)"}[source]


def node_rows(across: AcrossNodes) -> list[list[str]]:
    """One row per node, :data:`NODE_COLUMNS`."""
    rows = []
    for node in across.nodes:
        first = node.first_error
        if not node.read:
            error = ["(log not read)", "-", "-"]
        elif first is None:
            error = ["none", "-", "-"]
        else:
            error = [f"{first.summary} ({'echo' if first.echo else 'cause'})", _when(first.time, first.time_from),
                     f"{first.file}:{first.line}"]
        rows.append([node.label, node.host or "?", *error, _when(node.ended, node.ended_from)])
    return rows


def node_text(across: AcrossNodes) -> list[str]:
    """The nodes as an aligned table, then the verdict."""
    rows = [list(NODE_COLUMNS), *node_rows(across)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(NODE_COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return [f"nodes ({len(across.nodes)}):", *("  " + line for line in lines), f"verdict: {across.verdict}"]


def triage_text(triage: Triage) -> list[str]:
    """Plain lines for a terminal."""
    out = [f"{counted(len(triage.files_read), 'file')} read: {triage.summary_line()}"]
    if triage.across_nodes is not None:
        out += ["", *node_text(triage.across_nodes)]
    for f in triage.findings:
        out.append("")
        out.append(f"{'WARNING' if f.severity == 'warning' else 'FAILURE'}: {f.title}  [{f.key}]")
        out.append(f"  where:   {f.where}" + (f"  (also {_places(f)})" if _places(f) else ""))
        out.append(f"  line:    {f.text.strip()}")
        out.append(f"  meaning: {f.meaning}")
        out.append(f"  to do:   {f.action}")
    if triage.unrecognised:
        out += ["", "not recognised (error lines no known failure explains):"]
        for item in triage.unrecognised:
            extra = item.count - len(item.lines)
            out.append(f"  {item.file}" + (f"  ({extra} more not shown)" if extra > 0 else ""))
            out += [f"    {number}: {text}" for number, text in item.lines]
    for note in triage.notes:
        out.append(f"note: {note}")
    return out


def show_triage(triage: Triage) -> None:
    from IPython.display import Markdown, display

    display(Markdown("\n".join(triage_markdown(triage))))
