"""What a triage found: findings, error lines no entry explains, the files read; stored in
the stages' JSON results (``to_dict`` / ``from_dict``)."""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Optional

from hyport_lib.triage.catalogue import ERROR, WARNING


def _build(cls, data: Any, what: str):
    """``cls(**data)``, its ``list[...]`` fields of records built too (:data:`_PARTS`), with
    a one-line error naming ``what`` and the missing fields."""
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected a dict, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"{what}: missing field(s) {', '.join(missing)}")
    built = cls(**{k: v for k, v in data.items() if k in names})
    for name, (part, part_what) in _PARTS.get(cls.__name__, {}).items():
        setattr(built, name, [p if isinstance(p, part) else _build(part, p, part_what)
                              for p in getattr(built, name)])
    return built


@dataclass
class Place:
    """Where a failure shows: a file (relative to the triage's root when inside it) and a
    1-based line number."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Finding:
    """One known failure (fields of its catalogue entry), however many files and lines show
    it: ``file:line`` and ``text`` of the first, scrubbed and cut, with a few lines of
    ``context``; ``places``: the first line in each file (``more_places``: files beyond)."""

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
    """A file with error lines that no catalogue entry explains: ``[line number, text]`` of
    the first ones, scrubbed, and the ``count`` of all."""

    file: str
    lines: list[list] = field(default_factory=list)
    count: int = 0


@dataclass
class Triage:
    """The result of :func:`hyport_lib.triage.triage`: ``findings`` (causes, consequences,
    warnings), paths shown relative to ``root``, CANN logs read from ``since`` (seconds since
    the epoch); ``unread``: log files found but not read (the notes name them)."""

    findings: list[Finding] = field(default_factory=list)
    unrecognised: list[Unrecognised] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    root: Optional[str] = None
    cann_log_dir: Optional[str] = None
    since: Optional[float] = None
    notes: list[str] = field(default_factory=list)
    unread: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def unrecognised_count(self) -> int:
        """Error lines no entry explains, over every file."""
        return sum(item.count for item in self.unrecognised)

    @property
    def failed(self) -> bool:
        """A failure showed: a known error, or error lines nothing explains."""
        return bool(self.errors or self.unrecognised)

    def summary_line(self) -> str:
        """One line for a table cell: the first known error and where, else what is left."""
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
        """A :class:`Triage` from :meth:`to_dict`'s output; ValueError naming a bad field."""
        return _build(cls, data, "triage")


#: The fields of each record that hold records, their class and what an error calls them.
_PARTS = {"Finding": {"places": (Place, "triage finding place")},
          "Triage": {"findings": (Finding, "triage finding"),
                     "unrecognised": (Unrecognised, "triage unrecognised entry")}}
