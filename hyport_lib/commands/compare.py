"""``hyport compare RUN OTHER [...]``: recorded runs side by side as one offline page,
``compare.html``, in the first run's folder (:mod:`hyport_lib.workbook.compare`), a report
run's index and ``report.html`` written again to link it. A run is a
report run folder, an interactive run kept under ``outputs/interactive/history/``, or the
id (or the start of one) of either. Exit status: 0 when the page was written (or the runs
listed), 2 for a run not found or a bad argument.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hyport_lib.report.bundle import write_run_pages
from hyport_lib.report.paths import relative_text
from hyport_lib.report.run import RUN_JSON, read_report_run
from hyport_lib.results import outputs_dir
from hyport_lib.workbook.compare import compare_runs, list_runs
from hyport_lib.workbook.compare_show import COMPARE_PAGE, run_lines, write_compare_page


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="two runs or more: run folders or run ids (see --list)")
    parser.add_argument("--stage", action="append", default=None, metavar="STAGE",
                        help="compare only this stage: number, name or id, as report --only takes "
                             "them (04, train, 04_train; repeatable); default every stage recorded")
    parser.add_argument("--outputs", type=Path, default=None,
                        help="where report run ids are looked up, as report --output-dir "
                             "(default $HYPORT_OUTPUTS, else ./outputs); interactive runs: their history")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the page to write (default: {COMPARE_PAGE} in the first run's folder)")
    parser.add_argument("--list", action="store_true", help="list the recorded runs, newest first, and exit")


def run(args: argparse.Namespace) -> int:
    outputs = args.outputs or outputs_dir()  # where hyport report writes its runs
    if args.list:
        for found in list_runs(outputs):
            print(f"{found.id}\t{found.kind}\t{','.join(found.stages)}\t{found.folder}")
        return 0
    comparison = compare_runs(args.runs, stages=args.stage, outputs=outputs)
    # A report run's page lies beside its index (the run folder); an interactive run's in
    # its history folder.
    first = comparison.runs[0].root
    path = write_compare_page(comparison, args.out or first / COMPARE_PAGE,
                              lambda text: relative_text(text, first, "html"))
    for line in run_lines(comparison) + comparison.notes:
        print(line)
    print(f"compare page: {path}")
    # Into a report run's folder: its index and report.html link the page, as report --compare's.
    if comparison.runs[0].kind == "report" and (first / RUN_JSON).is_file() \
            and Path(path).resolve() == (first / COMPARE_PAGE).resolve():
        try:
            print(f"index: {write_run_pages(read_report_run(first))} (links {COMPARE_PAGE} now)")
        except (OSError, ValueError) as exc:  # the page is written: its link is what is missing
            print(f"index: not rewritten to link {COMPARE_PAGE}: {exc}", file=sys.stderr)
    return 0
