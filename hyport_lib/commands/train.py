"""``hyport train``: stage 04's smoke training from the command line.

The same stage as notebook 04 (:mod:`hyport_lib.train.stage`: its ``Params`` from the
flags, then plan with every check, run that plan, record), with a progress bar showing
the loss on stderr. Exit status: 0 when the run PASSes or WARNs (finished, with
non-finite values or skipped steps named in the output), 1 when it FAILs, 2 on bad
arguments or a bad dataset (nothing was started or written), 130 when stopped (torchrun
and its workers are stopped first; the steps that finished are shown and recorded).
"""

from __future__ import annotations

import argparse
import sys

from hyport_lib import params
from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.results import ensure_results_dir
from hyport_lib.train import stage
from hyport_lib.train.dataset_progress import reporting_to
from hyport_lib.train.params import Params
from hyport_lib.train.result import TrainProgress, TrainResult
from hyport_lib.train.show import summary_frame
from hyport_lib.utils.files import dumps_json

NAME = "train"
STAGE = stage.STAGE  # the stage this command runs
HELP = "smoke-train with torchrun + DeepSpeed (ZeRO 0/2/3, full or LoRA), checked and resumable"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    params.add_arguments(parser, Params)
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true", help=f"do not write the {STAGE} result file")


def _last_loss(progress: TrainProgress) -> str:
    last = progress.records[-1] if progress.records else {}
    if last.get("loss") is not None:
        return f"loss {last['loss']:.4f}"
    return "loss nan" if last.get("nonfinite_loss") else ""


def run(args: argparse.Namespace) -> int:
    given = params.from_arguments(Params, args)
    if not args.no_record:
        ensure_results_dir()  # named first: the default output_dir lies beside it
    # Records read and tokenised, said from the first second (100,000 records tokenise for minutes).
    reading = TerminalBar("dataset", "record", total=lambda p: p.total, done=lambda p: p.done,
                          phase=lambda p: p.phase)
    try:
        with reporting_to(reading):
            plan = stage.plan(given)
    finally:
        reading.close()
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"training: {plan.world_size} {plan.device_kind} process(es) -> {plan.output_dir}",
          file=sys.stderr)
    bar = TerminalBar("train", "step", total=lambda p: p.total_steps, done=lambda p: p.done_steps,
                      postfix=_last_loss)
    # Stopped: the steps and checkpoints that finished are shown and recorded.
    return run_showing_partial(lambda: stage.run(plan, on_progress=bar), bar, lambda result: _show(result, args))


def _show(result: TrainResult, args: argparse.Namespace) -> int:
    if args.json:
        print(dumps_json(result.to_dict(), indent=2))
    else:
        print(summary_frame(result).to_string(index=False))
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    return 1 if stage.summarize(result).verdict == "FAIL" else 0
