"""Notebook rendering of a ``ScanReport``: a one-line verdict, counts per category, the hits."""

from __future__ import annotations

from hyport_lib.scan import rules
from hyport_lib.scan.model import ScanReport

#: Red: blocks the port outright; yellow: a one-line change through the backend seam;
#: grey: could not be checked; orange (default): a package to replace.
_CATEGORY_COLOURS = {
    rules.FLASH_ATTN: "#ffcdd2", rules.REQUIREMENT: "#ffcdd2", rules.UNPARSABLE: "#e0e0e0",
    rules.NCCL: "#fff3c4", rules.CUDA_CALL: "#fff3c4", rules.CUDA_DEVICE: "#fff3c4",
    rules.CUDA_ENV: "#fff3c4",
}


def _category_colour(value) -> str:
    colour = _CATEGORY_COLOURS.get(str(value), "#ffe0b2")
    return f"background-color: {colour}"


def scan_tables(report: ScanReport):
    """``(counts_frame, hits_styler)``: what ``show_scan`` displays, for reuse in reports."""
    import pandas as pd

    counts = pd.DataFrame(sorted(report.counts().items()), columns=["category", "hits"])
    hits = report.frame()
    styler = hits.style.hide(axis="index").set_properties(
        subset=["snippet"], **{"font-family": "monospace", "text-align": "left"})
    styler = styler.set_properties(subset=["suggestion"], **{"text-align": "left"})
    if len(hits):
        styler = styler.map(_category_colour, subset=["category"])
    return counts, styler


def show_scan(report: ScanReport) -> None:
    """Display the verdict line, the counts per category and the table of hits."""
    from IPython.display import Markdown, display

    verdict = "clean: nothing CUDA-only found" if report.clean else f"{len(report.hits)} findings"
    lines = [f"**Port scan of `{report.root}`**: {report.files_scanned} files scanned, {verdict}."]
    if report.unparsable:
        lines.append("Files that could not be parsed (Python ones were scanned line by line): "
                     + ", ".join(f"`{f}` ({e})" for f, e in report.unparsable))
    display(Markdown("\n\n".join(lines)))
    if report.hits:
        counts, styler = scan_tables(report)
        display(counts.style.hide(axis="index"))
        display(styler)
