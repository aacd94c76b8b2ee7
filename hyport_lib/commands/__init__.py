"""The ``hyport`` command line.

Each subcommand is a module in this package defining ``NAME`` (the module's own name),
``HELP`` (both plain string literals), ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are discovered, so a new stage adds its command by adding a module. Usage errors
(exit 2) and stop signals (exit 130) are handled for every command in one place,
:mod:`._cli`.

A command module imports its stage, and a stage imports what it runs (torch, pandas,
papermill, ...). So ``hyport --help`` reads every command's ``NAME`` and ``HELP`` from
its source without importing it, and ``hyport COMMAND ...`` imports that one command.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

from hyport_lib.commands._cli import STOPPED_EXIT, invoke
from hyport_lib.processes import exit_without_teardown
from hyport_lib.utils.signals import STOP_SIGNALS


def _declared(path: Path) -> Optional[tuple[str, str]]:
    """``(NAME, HELP)`` of a command module, read from its source; None for a module
    that declares no command."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and getattr(node.targets[0], "id", None) in ("NAME", "HELP"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    if "NAME" not in found:
        return None
    if found["NAME"] != path.stem or not isinstance(found.get("HELP"), str):
        raise ImportError(f"{path}: a command module sets NAME = {path.stem!r} and HELP to "
                          "plain string literals")
    return found["NAME"], found["HELP"]


def commands() -> dict[str, str]:
    """Every command's name and help, without importing any command module."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        declared = _declared(Path(__path__[0]) / f"{info.name}.py")
        if declared:
            found[declared[0]] = declared[1]
    return found


def build_parser(only: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The ``hyport`` parser: every command listed with its help.

    Args:
        only: the commands whose modules are imported and whose arguments are added
            (default: all); the others are listed but take no arguments.
    """
    parser = argparse.ArgumentParser(
        prog="hyport", description="Porting workbook for Hugging Face models on Ascend NPUs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text in commands().items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name in only:
            module = importlib.import_module(f"{__name__}.{name}")
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run that command through :func:`invoke`.

    Returns:
        The command's exit status (see :mod:`._cli` for 2, 3 and 130).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no option but -h: the first word, when a command, is it.
    args = build_parser(only=argv[:1]).parse_args(argv)
    return invoke(args.command, args._run, args)


def cli() -> None:
    """The ``hyport`` executable: :func:`main`, then exit with its status.

    A command that was stopped has already written what it keeps; a further Ctrl-C
    while the interpreter shuts down must not turn exit 130 into death by SIGINT.
    """
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
