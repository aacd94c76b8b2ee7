"""``hyport scan PATH``: the static port scan from the command line. Exit status: 0 when
nothing was found (or with ``--exit-zero``), 1 when something was, 2 when PATH cannot be
scanned.
"""

from __future__ import annotations

import argparse
from itertools import groupby

from hyport_lib.scan.hits import ScanReport
from hyport_lib.scan.rules import CATEGORIES
from hyport_lib.scan.scanner import DEFAULT_EXCLUDE, scan_path
from hyport_lib.utils.files import dumps_json
from hyport_lib.utils.wording import counted, plural

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
    """The human-readable report, by kind then file: one row per source line, and each
    suggestion once, with the lines it covers (a line importing three helpers is one row,
    a long suggestion is not repeated on every line)."""
    out = []
    by_category = sorted(report.hits, key=lambda h: (h.category, h.file, h.line, h.col))
    for category, group in groupby(by_category, key=lambda h: h.category):
        hits = list(group)
        rows = {(h.file, h.line): h for h in hits}
        out.append(f"== {category} ({len(rows)} line{'s' if len(rows) != 1 else ''}) ==")
        width = max(len(f"{f}:{n}") for f, n in rows)
        suggestions: dict[str, list[str]] = {}
        for (file, line), hit in rows.items():
            snippet = hit.snippet
            if len(snippet) > SNIPPET_WIDTH:
                snippet = snippet[:SNIPPET_WIDTH - 1] + "…"
            out.append(f"{f'{file}:{line}'.ljust(width)}  {snippet}")
        for hit in hits:
            for text in hit.suggestion.split(" | "):
                where = f"{hit.file}:{hit.line}"
                lines = suggestions.setdefault(text, [])
                if where not in lines:
                    lines.append(where)
        for text, lines in suggestions.items():
            out.append(f"  → {text}  [{', '.join(lines)}]")
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
        n = len(report.unparsable)
        out.append(f"{counted(n, 'file')} not parsed: {plural('its', n, 'their')} lines were scanned "
                   "by pattern only, so something may be missed there")
    for file, error in report.unparsable:
        out.append(f"unparsable: {file}: {error}")
    for file, why in report.skipped:
        out.append(f"skipped: {file}: {why}")
    for package, spec in report.pinned.items():
        out.append(f"{package} pinned: {spec}; serve that version's API with "
                   f"install_flash_attn_shim(version=...) (or flash_attn_version=... in the "
                   f"stages): unpad_input returns 4 values before 2.7, 5 from 2.7 on")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    categories = _categories(args.category)
    report = scan_path(args.path, exclude=DEFAULT_EXCLUDE + tuple(args.exclude))
    report = report.only(categories)
    if args.json:
        print(dumps_json(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_text(report))
    return 0 if report.clean or args.exit_zero else 1
