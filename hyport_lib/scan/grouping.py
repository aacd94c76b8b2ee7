"""Scan findings as a reader wants them: by kind, one row per source line, each
suggestion once with the lines it covers (a line importing three flash-attn helpers is
three findings but one place to change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from hyport_lib.scan.model import Hit


@dataclass
class HitGroup:
    """Findings of one kind that share a suggestion (the first of ``a | b`` alternatives);
    ``places``: ``(file, line, snippet)`` once per source line, in file and line order."""

    category: str
    suggestion: str
    places: list[tuple[str, int, str]] = field(default_factory=list)

    def where(self) -> list[str]:
        return [f"{file}:{line}" for file, line, _ in self.places]


def group_hits(hits: Iterable[Hit]) -> list[HitGroup]:
    """One :class:`HitGroup` per (category, suggestion), by category, then first place."""
    groups: dict[tuple[str, str], HitGroup] = {}
    for hit in sorted(hits, key=lambda h: (h.category, h.file, h.line)):
        suggestion = hit.suggestion.split(" | ")[0]
        group = groups.setdefault((hit.category, suggestion), HitGroup(hit.category, suggestion))
        if all((f, n) != (hit.file, hit.line) for f, n, _ in group.places):
            group.places.append((hit.file, hit.line, hit.snippet))
    return list(groups.values())


def lines_frame(hits: Iterable[Hit]):
    """One row per source line (file, line, kinds, snippet) as a DataFrame."""
    import pandas as pd

    rows: dict[tuple[str, int], dict] = {}
    for group in group_hits(hits):
        for file, line, snippet in group.places:
            row = rows.setdefault((file, line), {"file": file, "line": line, "kind": [], "snippet": snippet})
            if group.category not in row["kind"]:
                row["kind"].append(group.category)
    ordered = sorted(rows.values(), key=lambda r: (r["file"], r["line"]))
    return pd.DataFrame([{**r, "kind": ", ".join(r["kind"])} for r in ordered],
                        columns=["file", "line", "kind", "snippet"])


def suggestions_frame(hits: Iterable[Hit]):
    """One row per kind and suggestion, with the lines it covers, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame([{"kind": g.category, "suggestion": g.suggestion, "lines": ", ".join(g.where())}
                         for g in group_hits(hits)], columns=["kind", "suggestion", "lines"])

