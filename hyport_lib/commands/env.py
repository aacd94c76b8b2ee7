"""``hyport env``: the environment check from the command line (stage 01's other client)."""

from __future__ import annotations

import argparse
import sys

from hyport_lib.utils.files import dumps_json
from hyport_lib.utils.redact import scrub_text

NAME = "env"
HELP = "Collect and judge this host's environment (paste the output into a bug report)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=("auto", "npu", "cuda", "cpu"),
                        help="backend to check (default: auto-detect)")
    parser.add_argument("--num-cards", type=int, default=None, metavar="N",
                        help="cards the next stages will use (default: all; 2 on CPU)")
    parser.add_argument("--model-path", default="tiny",
                        help="the model to judge the host for (does its processor need torchvision?)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-record", action="store_true",
                        help="do not write results/01_environment.json (see hyport_lib.results)")


def run(args: argparse.Namespace) -> int:
    """Print the report; exit status 1 when any check FAILs, else 0."""
    from hyport_lib.environment import stage

    if args.num_cards is not None and args.num_cards < 1:
        raise ValueError(f"--num-cards must be at least 1, got {args.num_cards}")
    if not args.no_record:
        from hyport_lib.results import ensure_results_dir

        ensure_results_dir()
    report = stage.run(device=args.device, num_cards=args.num_cards, model_path=args.model_path)
    if args.json:
        print(scrub_text(dumps_json(report.to_dict(), indent=2)))
    else:
        print(report.to_text(), end="")
    if not args.no_record:
        print(f"recorded {stage.record(report)}", file=sys.stderr)
    return 1 if report.verdict == "FAIL" else 0
