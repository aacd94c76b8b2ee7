"""``hyport report``: run the stage notebooks into one offline HTML report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hyport_lib.report.profiles import parse_overrides
from hyport_lib.report.runner import DEFAULT_CELL_TIMEOUT_S, run_report

NAME = "report"
HELP = "Run the notebooks with papermill into outputs/<run-id>/ (index.html, per-stage HTML, results)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="default",
                        help="profile name in parameters/ or a YAML path; 'none' for notebook defaults")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override one parameter (repeatable); VALUE is parsed as YAML")
    parser.add_argument("--only", default="", help="comma-separated stages, e.g. 01,04 or environment")
    parser.add_argument("--output-dir", type=Path, default=None, help="root folder for runs (default ./outputs)")
    parser.add_argument("--notebooks", type=Path, default=None, help="notebooks folder (default: the repo's)")
    parser.add_argument("--cell-timeout", type=int, default=DEFAULT_CELL_TIMEOUT_S,
                        help="seconds one notebook cell may run before the stage fails")
    parser.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the notebook's, python3)")
    parser.add_argument("--hide-inputs", action="store_true", help="HTML without code cells")


def run(args: argparse.Namespace) -> int:
    # Stop signals (Ctrl-C, SIGTERM, SIGHUP) end the run through commands._cli: the
    # runner writes the partial report, the kernel and its workers stop, exit 130.
    profile = None if args.profile in ("", "none") else args.profile
    report = run_report(
        profile=profile, overrides=parse_overrides(args.param),
        only=[s for s in args.only.split(",") if s.strip()] or None,
        output_root=args.output_dir, notebooks_dir=args.notebooks,
        cell_timeout_s=args.cell_timeout, kernel_name=args.kernel,
        show_inputs=not args.hide_inputs, progress_bar=sys.stderr.isatty(),
    )
    print(report.run_dir / "index.html")
    return 0 if report.ok else 1
