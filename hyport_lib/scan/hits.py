"""What the scan found: one :class:`Hit` per finding, gathered in a :class:`ScanReport`,
and the source-text helpers every scanner makes its hits with."""

from __future__ import annotations

import re
import tokenize
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from io import BytesIO
from typing import Any, Iterable, Optional

from hyport_lib.utils.typed_records import from_mapping

SNIPPET_MAX = 200
_LINE_SPLIT_RE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as the Python tokenizer counts them (form feeds etc. are not line breaks)."""
    return _LINE_SPLIT_RE.split(text)


def decode_source(data: bytes) -> tuple[str, Optional[str]]:
    """Decode Python source by its coding cookie; ``(text, error)``, text is always usable."""
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
        return data.decode(encoding), None
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return data.decode("utf-8", errors="replace"), f"{type(exc).__name__}: {exc}"


def _snippet(source_line: str) -> str:
    text = source_line.strip()
    return text if len(text) <= SNIPPET_MAX else text[:SNIPPET_MAX - 1] + "…"


@dataclass(frozen=True, order=True)
class Hit:
    """One finding: ``file`` relative to the scanned root (``/`` separators), 1-based
    ``line``, 0-based ``col``, the stripped source line and what to write instead on Ascend."""

    file: str
    line: int
    col: int
    category: str
    snippet: str
    suggestion: str


def hit_at(rel: str, lines: list[str], line: int, col: int, category: str, suggestion: str) -> Hit:
    """A hit whose snippet is line ``line`` (1-based) of ``lines``."""
    source = lines[line - 1] if 0 < line <= len(lines) else ""
    return Hit(rel, line, col, category, _snippet(source), suggestion)


@dataclass
class ScanReport:
    """Everything one ``scan_path`` call found."""

    root: str  # the path as given
    hits: list[Hit] = field(default_factory=list)
    # files that could not be parsed (also ``unparsable`` hits), scanned line by line
    unparsable: list[tuple[str, str]] = field(default_factory=list)
    files_scanned: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # not regular files: never opened
    #: ``{"flash-attn": "==2.6.3 (requirements.txt:2)"}``: the flash-attn version the
    #: project pins, so the shim can serve that version's API (``unpad_input`` returns 4
    #: values before 2.7, 5 from 2.7 on).
    pinned: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """True when nothing was found (a file that does not parse is a finding)."""
        return not self.hits and not self.unparsable

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(h.category for h in self.hits).items()))

    def only(self, categories: Optional[Iterable[str]]) -> "ScanReport":
        """A copy keeping only hits of ``categories`` (None: all) and, whatever the filter,
        unparsable files: a filtered report of one must not read as clean."""
        if categories is None:
            return self
        keep = set(categories) | {"unparsable"}
        return replace(self, hits=[h for h in self.hits if h.category in keep])

    def to_dict(self) -> dict:
        return {
            "root": self.root,
            "files_scanned": self.files_scanned,
            "clean": self.clean,
            "counts": self.counts(),
            "hits": [asdict(h) for h in self.hits],
            "unparsable": [{"file": f, "error": e} for f, e in self.unparsable],
            "skipped": [{"file": f, "why": w} for f, w in self.skipped],
            "pinned": dict(self.pinned),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "ScanReport":
        """:meth:`to_dict` read back; an odd record gives defaults (see
        :mod:`hyport_lib.utils.typed_records`)."""
        data = data if isinstance(data, Mapping) else {}
        pairs = {key: [(str(d.get(first)), str(d.get(second))) for d in data.get(key) or []
                       if isinstance(d, Mapping)]
                 for key, first, second in (("unparsable", "file", "error"), ("skipped", "file", "why"))}
        return from_mapping(cls, {**data, **pairs})
