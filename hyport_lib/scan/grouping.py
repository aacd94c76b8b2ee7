"""Scan findings as a reader wants them: by kind, one row per source line, each
suggestion once with the lines it covers (a line importing three flash-attn helpers is
three findings but one place to change), from ``Hit`` objects or their recorded dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class HitGroup:
    """Findings of one kind that share a suggestion (the first of ``a | b`` alternatives);
    ``places``: ``(file, line, snippet)`` once per source line, in file and line order."""

    category: str
    suggestion: str
    places: list[tuple[str, int, str]] = field(default_factory=list)

    def where(self) -> list[str]:
        return [f"{file}:{line}" for file, line, _ in self.places]


def _get(hit: Any, name: str):
    return hit.get(name) if isinstance(hit, dict) else getattr(hit, name, None)


def _line(hit: Any) -> int:
    try:
        return int(_get(hit, "line") or 0)
    except (TypeError, ValueError):
        return 0


def group_hits(hits: Iterable[Any]) -> list[HitGroup]:
    """One :class:`HitGroup` per (category, suggestion), by category, then first place.
    Entries that are neither a ``Hit`` nor a dict are ignored (a recorded result may be odd)."""
    usable = [h for h in hits if isinstance(h, dict) or hasattr(h, "category")]
    ordered = sorted(usable, key=lambda h: (str(_get(h, "category")), str(_get(h, "file")), _line(h)))
    groups: dict[tuple[str, str], HitGroup] = {}
    for hit in ordered:
        category = str(_get(hit, "category") or "")
        suggestion = str(_get(hit, "suggestion") or "").split(" | ")[0]
        group = groups.setdefault((category, suggestion), HitGroup(category, suggestion))
        file, line = str(_get(hit, "file") or ""), _line(hit)
        if all((f, n) != (file, line) for f, n, _ in group.places):
            group.places.append((file, line, str(_get(hit, "snippet") or "")))
    return list(groups.values())


def lines_frame(hits: Iterable[Any]):
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


def suggestions_frame(hits: Iterable[Any]):
    """One row per kind and suggestion, with the lines it covers, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame([{"kind": g.category, "suggestion": g.suggestion, "lines": ", ".join(g.where())}
                         for g in group_hits(hits)], columns=["kind", "suggestion", "lines"])


__all__ = ["HitGroup", "group_hits", "lines_frame", "suggestions_frame"]
