"""Notebook rendering of a ``ScanReport``: a one-line verdict, the flash-attn pin, counts per
category, one row per source line, and each suggestion once per kind with the lines it
covers (a line importing three flash-attn helpers is three findings but one place to change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from hyport_lib.display import fit, styled
from hyport_lib.scan import rules
from hyport_lib.scan.hits import Hit, ScanReport
from hyport_lib.utils.imports import pinned_version, unpad_input_values

#: Red: blocks the port outright; yellow: a one-line change through the backend seam;
#: grey: could not be checked; orange (default): a package to replace.
_CATEGORY_COLOURS = {
    rules.FLASH_ATTN: "#ffcdd2", rules.REQUIREMENT: "#ffcdd2", rules.UNPARSABLE: "#e0e0e0",
    rules.NCCL: "#fff3c4", rules.CUDA_CALL: "#fff3c4", rules.CUDA_DEVICE: "#fff3c4",
    rules.CUDA_ENV: "#fff3c4",
}


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


def _category_colour(value) -> str:
    colour = _CATEGORY_COLOURS.get(str(value), "#ffe0b2")
    return f"background-color: {colour}"


def scan_tables(report: ScanReport):
    """``(counts_frame, lines_styler, suggestions_styler)``: what ``show_scan`` displays."""
    import pandas as pd

    counts = pd.DataFrame(sorted(report.counts().items()), columns=["category", "hits"])
    lines = styled(lines_frame(report.hits)).set_properties(
        subset=["snippet"], **{"font-family": "monospace", "text-align": "left", "white-space": "pre-wrap"})
    suggestions = styled(suggestions_frame(report.hits), colour=("kind",) if report.hits else (),
                         cell_colour=_category_colour).set_properties(
        subset=["suggestion", "lines"], **{"text-align": "left"})
    return counts, lines, suggestions


def pins(report: ScanReport, served: Optional[str] = None) -> list[dict]:
    """What the project pins of flash-attn (``name``, ``spec``, ``version``) and, given the
    version whose API the drop-in served, whether the two differ in what ``unpad_input``
    returns (``mismatch``)."""
    out = []
    for name, spec in report.pinned.items():
        version = pinned_version(spec)
        out.append({"name": name, "spec": spec, "version": version, "mismatch": bool(
            served and version and unpad_input_values(version) != unpad_input_values(served))})
    return out


def pinned_lines(report: ScanReport, served: Optional[str] = None) -> list[str]:
    out = []
    for pin in pins(report, served):
        out.append(f"`{pin['name']}` pinned by the project: `{pin['spec']}`.")
        if pin["mismatch"]:
            pinned = pin["version"]
            out.append(f"**The drop-in served the flash-attn {served} API**, whose `unpad_input` returns "
                       f"{unpad_input_values(served)} values; code written for {pinned} expects "
                       f"{unpad_input_values(pinned)}: set `flash_attn_version = \"{pinned}\"`.")
    return out


def show_scan(report: ScanReport, served: Optional[str] = None) -> None:
    """Display the verdict line, the counts per category, the lines found and what to
    write instead; ``served``: the flash-attn version hyport's drop-in served (stage 02),
    to say when the project pins one whose API differs."""
    from IPython.display import Markdown, display

    verdict = "clean: nothing CUDA-only found" if report.clean else f"{len(report.hits)} findings"
    lines = [f"**Port scan of `{report.root}`**: {report.files_scanned} files scanned, {verdict}."]
    if report.unparsable:
        lines.append("Files that could not be parsed (Python ones were scanned line by line): "
                     + ", ".join(f"`{f}` ({e})" for f, e in report.unparsable))
    lines += pinned_lines(report, served)
    display(Markdown("\n\n".join(lines)))
    if report.hits:
        counts, by_line, suggestions = scan_tables(report)
        display(fit(counts))
        display(fit(by_line))
        display(fit(suggestions))
