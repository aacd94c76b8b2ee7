"""The ``hyport`` command line: an explicit registry of its commands (as accelerate keeps).

A stage command's module declares ``COMMAND`` (a :class:`~._stage.StageCommand`); any other
defines ``add_arguments(parser)`` and ``run(args) -> int``. Exit statuses: :mod:`._cli`.
``hyport --help`` imports no command module (they import torch, pandas, papermill ...);
``hyport COMMAND`` imports that one only.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from typing import Optional, Sequence

from hyport_lib.commands._cli import STOPPED_EXIT, invoke
from hyport_lib.processes import exit_without_teardown
from hyport_lib.utils.signals import STOP_SIGNALS

#: Every command (= its module's name) and its help, in the order ``hyport --help`` lists them.
COMMANDS: dict[str, str] = {
    "attention": "Compare attention backends (NPU / emulated / sdpa / eager) with a float64 reference.",
    "compare": ("Compare recorded runs side by side (verdicts, tokens/s, 02's differing cases, 03's cards, "
                "04's losses overlaid) into compare.html in the first run's folder."),
    "env": "Collect and judge this host's environment (paste the output into a bug report).",
    "infer": "run the same generation on every card, one fresh process per card, and compare",
    "plan": ("Will it fit? Card and host memory of ZeRO 0, 2, 3 x full / LoRA fine-tunes and of "
             "inference, from the checkpoint's headers alone (nothing is loaded)."),
    "port": ("Rewrite a copy of model code for Ascend (flash_attn -> npu_fusion_attention, .cuda(), "
             "torch.cuda, nccl, is_cuda guards), write port.diff / port.json, prove it on a tiny model."),
    "report": "Run the notebooks with papermill into outputs/<run-id>/ (index.html, per-stage HTML, results).",
    "scan": ("Static port scan: flash_attn, .cuda(), torch.cuda, cuda devices, nccl, apex, xformers, "
             "triton, bitsandbytes in code and requirements."),
    "train": "smoke-train with torchrun + DeepSpeed (ZeRO 0/2/3, full or LoRA), checked and resumable",
    "triage": ("Read the logs of a failed run (run folder, log folders or files, CANN plogs) and say which "
               "known NPU failure they show, where, what it means and what to do."),
    "verify": ("verify saved safetensors weights: headers, index, NaN/Inf, reload, comparison with a "
               "base or a checkpoint, DeepSpeed ZeRO states"),
}


def command_target(name: str):
    """The module's ``COMMAND`` (a stage command), else the module itself."""
    module = importlib.import_module(f"{__name__}.{name}")
    return getattr(module, "COMMAND", module)


def build_parser(only: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """Every command listed with its help; only those in ``only`` (default: all) imported
    and given their arguments."""
    parser = argparse.ArgumentParser(
        prog="hyport", description="Porting workbook for Hugging Face models on Ascend NPUs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name in only:
            target = command_target(name)
            target.add_arguments(cmd)
            cmd.set_defaults(_run=target.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no option but -h: the first word, when a command, is it.
    args = build_parser(only=argv[:1]).parse_args(argv)
    return invoke(args.command, args._run, args)


def cli() -> None:
    """The ``hyport`` executable. A stopped command has written what it keeps: a further
    Ctrl-C at shutdown must not turn 130 into SIGINT."""
    code = main()
    if code == STOPPED_EXIT:
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            signal.signal(sig, signal.SIG_IGN)
    if "pyarrow" in sys.modules:
        # After a parquet dataset was read, pyarrow's thread pool now and then aborts the
        # interpreter's teardown ("terminate called without an active exception", SIGABRT),
        # turning a clean exit 2 into death by a signal. Everything is written by now.
        exit_without_teardown(code)
    sys.exit(code)
