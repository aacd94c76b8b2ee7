"""``hyport report``: run the stage notebooks into one offline HTML report.

Exit status: 0 when every stage PASSed or WARNed, 1 when one FAILed, 2 when nothing ran
(bad parameters, profile, ``--only`` or output folder: checked before any stage starts),
130 when stopped (the partial report is written first).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hyport_lib.report.bundle import write_run_pages, zip_run
from hyport_lib.report.paths import relative_text
from hyport_lib.report.run_parameters import parse_overrides
from hyport_lib.report.runner import DEFAULT_CELL_TIMEOUT_S, check_output_root, clean_runs, run_report
from hyport_lib.results import outputs_dir
from hyport_lib.workbook.compare import compare_runs, find_run
from hyport_lib.workbook.compare_show import COMPARE_PAGE, write_compare_page
from hyport_lib.utils.wording import counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="default",
                        help="profile name in parameters/ or a YAML path; 'none' for notebook defaults")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override one parameter (repeatable); VALUE is parsed as YAML")
    parser.add_argument("--only", default=None, help="comma-separated stages, e.g. 01,04 or environment")
    parser.add_argument("--output-dir", type=_folder, default=None, help="root folder for runs (default $HYPORT_OUTPUTS, else ./outputs)")
    parser.add_argument("--run-dir", type=_folder, default=None, metavar="PATH",
                        help="the run folder itself (default: a new one under --output-dir); on several "
                             "hosts (-p nnodes=N -p node_rank=K) the same folder on shared storage for "
                             "every node: node 0 writes the index and drafts, node K its part in "
                             "PATH/nodes/nodeK")
    parser.add_argument("--notebooks", type=Path, default=None, help="notebooks folder (default: the repo's)")
    parser.add_argument("--cell-timeout", type=int, default=DEFAULT_CELL_TIMEOUT_S,
                        help="seconds one notebook cell may run before the stage fails")
    parser.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the notebook's, python3)")
    parser.add_argument("--hide-inputs", action="store_true", help="HTML without code cells")
    parser.add_argument("--allow-unknown-parameters", action="store_true",
                        help="accept profile keys no notebook declares (listed as ignored)")
    parser.add_argument("--zip", action="store_true",
                        help="also write outputs/<run-id>.zip: the whole run folder, to send")
    parser.add_argument("--compare", default=None, metavar="RUN",
                        help="also write compare.html into the run folder: this run beside RUN (an "
                             "earlier run folder or run id, see hyport compare --list)")
    parser.add_argument("--clean", action="store_true",
                        help="only clean runs that were killed (remove their partial notebooks, "
                             "scrub their files, mark them INTERRUPTED), then exit")


def _folder(text: str) -> Path:
    # Path("") is ".": an empty value would scatter the run into the current folder.
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty value")
    return Path(text)


def _only(text):
    if text is None:
        return None
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    if not wanted:
        raise ValueError(f"--only {text!r}: name at least one stage, e.g. --only 01,03")
    return wanted


def run(args: argparse.Namespace) -> int:
    # Stop signals (Ctrl-C, SIGTERM, SIGHUP) end the run through commands._cli: the
    # runner writes the partial report, the kernel and its workers stop, exit 130.
    if args.clean and (args.zip or args.run_dir):
        raise ValueError(f"--clean only cleans killed runs and runs nothing: leave "
                         f"{'--zip' if args.zip else '--run-dir'} out")
    if args.clean:
        root = check_output_root(args.output_dir or outputs_dir())
        cleaned = clean_runs(root, lambda m: print(m, file=sys.stderr))
        print(f"{counted(len(cleaned), 'killed run')} cleaned under {root}")
        return 0
    if args.cell_timeout <= 0:
        raise ValueError(f"--cell-timeout {args.cell_timeout}: expected a positive number of seconds")
    profile = None if args.profile in ("", "none") else args.profile
    # The run to compare with is found before any stage starts (a wrong name is exit 2):
    # report runs under the root this run writes to, interactive ones in their history.
    other = find_run(args.compare, args.output_dir or outputs_dir()) if args.compare else None
    report = run_report(
        profile=profile, overrides=parse_overrides(args.param), only=_only(args.only),
        output_root=args.output_dir, notebooks_dir=args.notebooks,
        cell_timeout_s=args.cell_timeout, kernel_name=args.kernel,
        show_inputs=not args.hide_inputs,
        # No papermill bar: the terminal shows one line per stage, and while a stage runs
        # its stderr goes to the stage log, where a bar would only leave \r lines.
        progress_bar=False,
        allow_unknown_parameters=args.allow_unknown_parameters, run_dir=args.run_dir,
    )
    if other is not None:
        # The report is written: a run that recorded nothing to compare costs its page,
        # not the report's exit status or the index line.
        try:
            page = write_compare_page(compare_runs([report.run_dir, other]), report.run_dir / COMPARE_PAGE,
                                      lambda text: relative_text(text, report.run_dir, "html"))
            print(f"compare: {page}", file=sys.stderr)
            write_run_pages(report)  # the index (and report.html's copy of it) link to the page now
        except (ValueError, OSError) as exc:
            print(f"compare: not written: {exc}", file=sys.stderr)
    if args.zip:
        packed = zip_run(report.run_dir)
        print(f"zip: {packed} ({packed.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    print(report.run_dir / "index.html")
    return 0 if report.ok else 1
