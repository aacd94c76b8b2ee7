"""``hyport infer``: the N-card inference grid from the command line.

The same stage as notebook 03 (:mod:`hyport_lib.inference.stage`: its ``Params`` from the
flags, then plan, run, record), with a progress bar on stderr instead of the live table.
Exit status: 0 when every launched card finished (busy cards skipped are not failures),
1 when a card failed or timed out or none ran, 2 on bad arguments, 130 when stopped
(Ctrl-C, SIGTERM, SIGHUP: see :mod:`hyport_lib.commands._cli`); the grid's cleanup kills
the workers' process groups and scrubs their logs first. (Even without that, the workers
follow the launcher's exit: see :mod:`hyport_lib.processes`.)
"""

from __future__ import annotations

import argparse
import sys

from hyport_lib import params
from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.inference import stage
from hyport_lib.inference.params import Params
from hyport_lib.inference.show import compact_frame
from hyport_lib.inference.table import GridResult
from hyport_lib.results import ensure_results_dir
from hyport_lib.utils.files import dumps_json

NAME = "infer"
STAGE = stage.STAGE  # the stage this command runs
HELP = "run the same generation on every card, one fresh process per card, and compare"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    params.add_arguments(parser, Params)
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true",
                        help=f"do not write the {STAGE} result file")


def _status_counts(progress) -> str:
    counts = progress.frame["status"].value_counts().to_dict()
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def run(args: argparse.Namespace) -> int:
    stage_params = params.from_arguments(Params, args)
    if not args.no_record:
        # Named before anything runs, not after the grid (the default log folder is beside it).
        ensure_results_dir()
    plan = stage.plan(stage_params)
    print(f"hyport infer: attention {plan.config.attn_implementation}", file=sys.stderr)
    for note in plan.notes:  # what the plan decided: host RAM, the attention's proof
        print(f"hyport infer: {note}", file=sys.stderr)
    bar = TerminalBar("cards", "card", total=lambda p: p.total, done=lambda p: p.done,
                      postfix=_status_counts)
    # Stopped: the cards that finished are shown and recorded.
    return run_showing_partial(lambda: stage.run(plan, on_progress=bar), bar,
                               lambda result: _show(result, args))


def _show(result: GridResult, args: argparse.Namespace) -> int:
    if args.json:
        print(dumps_json(result.to_dict(), indent=2))
    else:
        print(compact_frame(result.frame).round(3).to_string(index=False, na_rep=""))
        print()
        print(result.consistency_line)
        print(f"logs: {result.log_dir}   wall {result.wall_s:.1f}s   ({result.provenance.label})")
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    counts = result.counts
    verdict = stage.summarize(result).verdict
    return 1 if verdict == "FAIL" or counts["failed"] or counts["timeout"] else 0
