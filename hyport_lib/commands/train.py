"""``hyport train``: stage 04's smoke training from the command line.

The same stage functions as notebook 04 (:mod:`hyport_lib.train.stage`: plan with
every check, run that plan, record), with a progress bar showing the loss on stderr.
Exit status: 0 when the run PASSes or WARNs (finished, with non-finite values or skipped
steps named in the output), 1 when it FAILs, 2 on bad arguments or a bad dataset
(nothing was started), 130 when stopped (torchrun and its workers are stopped first).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.utils.files import dumps_json

NAME = "train"
HELP = "smoke-train with torchrun + DeepSpeed (ZeRO 0/2/3, full or LoRA), checked and resumable"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hyport_lib.train.config import TrainConfig

    defaults = TrainConfig()
    for f in fields(TrainConfig):
        if f.name == "env_overrides":
            continue
        default = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, type=_flag, default=default, metavar="BOOL",
                                help=f"true/false (default {str(default).lower()})")
        else:
            parser.add_argument(flag, dest=f.name, default=default, metavar=f.name.upper(),
                                help=f"default {default!r}")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true", help="do not write the 04_train result")


def _flag(text: str) -> bool:
    from hyport_lib.utils.values import as_flag

    return as_flag("flag", text)


def _config(args: argparse.Namespace):
    from hyport_lib.train.config import TrainConfig

    values = {}
    for f in fields(TrainConfig):
        if f.name == "env_overrides":
            continue
        value = getattr(args, f.name)
        if isinstance(value, str) and value.strip().lower() in ("none", "null") and f.name in (
                "max_steps", "num_cards", "image_root", "deepspeed_config", "max_shard_size"):
            value = None
        values[f.name] = value
    return TrainConfig(**values)


def _last_loss(progress) -> str:
    last = progress.records[-1] if progress.records else {}
    if last.get("loss") is not None:
        return f"loss {last['loss']:.4f}"
    return "loss nan" if last.get("nonfinite_loss") else ""


def run(args: argparse.Namespace) -> int:
    from hyport_lib.train import stage

    if not args.no_record:
        from hyport_lib.results import ensure_results_dir

        ensure_results_dir()
    plan = stage.plan(_config(args))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"training: {plan.world_size} {plan.device_kind} process(es) -> {plan.output_dir}",
          file=sys.stderr)
    bar = TerminalBar("train", "step", total=lambda p: p.total_steps, done=lambda p: p.done_steps,
                      postfix=_last_loss)
    # Stopped: the steps and checkpoints that finished are shown and recorded.
    return run_showing_partial(lambda: stage.run(plan, on_update=bar), bar, lambda result: _show(result, args))


def _show(result, args) -> int:
    from hyport_lib.train import stage
    from hyport_lib.train.show import summary_frame

    if args.json:
        print(dumps_json(result.to_dict(), indent=2))
    else:
        print(summary_frame(result).to_string(index=False))
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    return 1 if stage.summarize(result).verdict == "FAIL" else 0
