"""``hyport attention``: the attention numerics comparison from the command line.

Prints the case x backend table against the float64 reference, the model-level check
(eager vs swapped attention on the model) and the static scan's counts; records the
stage result. Exit status: 0 when nothing FAILs, 1 when a row or the model check
FAILs, 2 on a bad parameter or a device that is not usable here (one line naming it).
"""

from __future__ import annotations

import argparse

from hyport_lib import params
from hyport_lib.attention import stage
from hyport_lib.attention.params import Params
from hyport_lib.attention.show import comparison_table, model_table
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.results import ensure_results_dir
from hyport_lib.utils.files import atomic_write_text, dumps_json

NAME = "attention"
STAGE = stage.STAGE  # the stage this command runs
HELP = "Compare attention backends (NPU / emulated / sdpa / eager) with a float64 reference."

#: Flags typed bare (the README, scripts/gpu_check.sh): ``--full`` alone means true.
def add_arguments(parser: argparse.ArgumentParser) -> None:
    params.add_arguments(parser, Params)
    parser.add_argument("--json", metavar="OUT", help="also write all rows as JSON to OUT")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    plan = stage.plan(params.from_arguments(Params, args))
    ensure_results_dir()  # an unwritable results folder is named before the grid runs
    bar = TerminalBar("attention grid", "case", total=lambda p: p.total, done=lambda p: p.done)

    def on_progress(update: stage.GridProgress) -> None:
        bar(update)
        if update.done == update.total:  # the model check and the scan follow: not the grid's time
            bar.close()

    try:
        result = stage.run(plan, on_progress=on_progress)
    finally:
        bar.close()
    comparison, model, scan = result.comparison, result.model, result.scan
    with pd.option_context("display.width", 250, "display.max_rows", None,
                           "display.max_columns", None, "display.max_colwidth", 90):
        print(comparison_table(comparison).drop(columns=["source"]).to_string(index=False))
        print()
        for b in comparison.backends:
            print(f"backend {b['name']}: {b['source']}")
        for note in comparison.notes:
            print(f"note: {note}")
        if model is not None:
            print()
            print(model_table(model).to_string(index=False))
    print(f"\nscan of {result.scanned_path}: {scan.files_scanned} files, {len(scan.hits)} "
          f"findings {scan.counts()}")
    if result.port_error:
        print(f"port: not made: {result.port_error}")
    elif result.port is not None:
        proof = result.port.proof or {"verdict": "none (nothing was rewritten)"}
        print(f"port: {result.port.dst}: {len(result.port.changes)} change(s), "
              f"{len(result.port.manual)} left for a human (port.json); proof "
              f"{proof.get('verdict')}{' (NPU path emulated on CPU)' if proof.get('emulated') else ''}"
              f"{': ' + proof['error'] if proof.get('error') else ''}")
    stage.record(result)
    summary = stage.summarize(result)
    if args.json:
        payload = {"verdict": summary.verdict, "summary": summary.summary,
                   "rows": comparison.rows, "backends": comparison.backends,
                   "notes": comparison.notes, "model": model.to_dict() if model else None}
        atomic_write_text(args.json, dumps_json(payload, indent=1))
    print(f"\n{summary.verdict}: {summary.summary}")
    return 1 if summary.verdict == "FAIL" else 0
