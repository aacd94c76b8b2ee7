"""``hyport env``: the environment check from the command line (stage 01's other client).

Prints the report (``--json``: as JSON) and records the stage result. Exit status: 0
when no check FAILs, 1 when one does, 2 on a bad parameter (one line naming it).
``--host-root TREE`` judges the container and driver checks on a copy of a host's or a
container's folders instead of this machine's (``docs/containers.md``).
"""

from __future__ import annotations

import argparse
import sys

from hyport_lib import params
from hyport_lib.environment import stage
from hyport_lib.environment.params import Params
from hyport_lib.results import ensure_results_dir
from hyport_lib.utils.files import dumps_json
from hyport_lib.utils.redact import scrub_text

NAME = "env"
STAGE = stage.STAGE  # the stage this command runs
HELP = "Collect and judge this host's environment (paste the output into a bug report)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    params.add_arguments(parser, Params)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-record", action="store_true",
                        help="do not write results/01_environment.json (see hyport_lib.results)")


def run(args: argparse.Namespace) -> int:
    """Print the report; exit status 1 when any check FAILs, else 0."""
    plan = stage.plan(params.from_arguments(Params, args))
    if not args.no_record:
        ensure_results_dir()  # an unwritable results folder is named before the collection
    report = stage.run(plan)
    if args.json:
        print(scrub_text(dumps_json(report.to_dict(), indent=2)))
    else:
        print(report.to_text(), end="")
    if not args.no_record:
        print(f"recorded {stage.record(report)}", file=sys.stderr)
    return 1 if report.verdict == "FAIL" else 0
