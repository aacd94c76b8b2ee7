"""``hyport scan PATH``: the static port scan from the command line.

Prints ``file:line  category  snippet  -> suggestion`` grouped by category, then a count
per category. Exit status: 0 when nothing was found (or with ``--exit-zero``), 1 when
something was, 2 when PATH cannot be scanned.
"""

from __future__ import annotations

import argparse
import json
from itertools import groupby

from hyport_lib.scan import CATEGORIES, DEFAULT_EXCLUDE, ScanReport, scan_path

NAME = "scan"
HELP = ("Static port scan: flash_attn, .cuda(), torch.cuda, cuda devices, nccl, apex, xformers, "
        "triton, bitsandbytes in code and requirements.")
SNIPPET_WIDTH = 90


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="folder (or single file) to scan")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--category", action="append", metavar="CAT",
        help=f"only these categories (repeat or comma-separate): {', '.join(CATEGORIES)}")
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="GLOB",
        help="also skip files / folders matching GLOB (repeatable); always skipped: "
             + ", ".join(DEFAULT_EXCLUDE))
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even when something is found")


def _categories(values):
    if not values:
        return None
    chosen = [c.strip() for value in values for c in value.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"--category: unknown {', '.join(unknown)} "
                         f"(known: {', '.join(CATEGORIES)})")
    return chosen


def format_text(report: ScanReport) -> str:
    """The human-readable report: hits grouped by category, then the counts."""
    out = []
    by_category = sorted(report.hits, key=lambda h: (h.category, h.file, h.line, h.col))
    for category, group in groupby(by_category, key=lambda h: h.category):
        hits = list(group)
        out.append(f"== {category} ({len(hits)}) ==")
        width = max(len(f"{h.file}:{h.line}") for h in hits)
        for hit in hits:
            snippet = hit.snippet
            if len(snippet) > SNIPPET_WIDTH:
                snippet = snippet[:SNIPPET_WIDTH - 1] + "…"
            where = f"{hit.file}:{hit.line}".ljust(width)
            out.append(f"{where}  {category}  {snippet}  → {hit.suggestion}")
        out.append("")
    files_hit = len({h.file for h in report.hits})
    if report.clean:
        out.append(f"clean: nothing CUDA-only found in {report.files_scanned} files scanned "
                   f"({report.root})")
    else:
        counts = ", ".join(f"{c} {n}" for c, n in report.counts().items())
        out.append(f"{len(report.hits)} findings in {files_hit} of {report.files_scanned} files "
                   f"scanned ({report.root}): {counts}")
    if report.unparsable:
        out.append(f"{len(report.unparsable)} file(s) not parsed: their lines were scanned "
                   "by pattern only, so something may be missed there")
    for file, error in report.unparsable:
        out.append(f"unparsable: {file}: {error}")
    for file, why in report.skipped:
        out.append(f"skipped: {file}: {why}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    categories = _categories(args.category)
    report = scan_path(args.path, exclude=DEFAULT_EXCLUDE + tuple(args.exclude))
    report = report.only(categories)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_text(report))
    return 0 if report.clean or args.exit_zero else 1
