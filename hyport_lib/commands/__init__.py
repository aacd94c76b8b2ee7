"""The ``hyport`` command line.

Each subcommand is a module in this package defining ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Modules are discovered, so a new
stage adds its command by adding a module. Usage errors (exit 2) and stop signals
(exit 130) are handled for every command in one place, :mod:`._cli`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
from typing import Optional, Sequence


def _command_modules():
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            yield module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hyport", description="Porting workbook for Hugging Face models on Ascend NPUs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _command_modules():
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from hyport_lib.commands._cli import invoke

    args = build_parser().parse_args(argv)
    return invoke(args.command, args._run, args)


def cli() -> None:
    """The ``hyport`` executable: :func:`main`, then exit with its status.

    A command that was stopped has already written what it keeps; a further Ctrl-C
    while the interpreter shuts down must not turn exit 130 into death by SIGINT.
    """
    from hyport_lib.commands._cli import STOPPED_EXIT
    from hyport_lib.utils.signals import STOP_SIGNALS

    code = main()
    if code == STOPPED_EXIT:
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    cli()
