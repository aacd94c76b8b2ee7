"""The one stage command: its flags are the stage's ``Params``, its work the stage contract.

``hyport env | attention | infer | train | verify`` are each a :class:`StageCommand`: one
flag per field of the stage's ``Params`` (:func:`hyport_lib.params.add_arguments`), plus
``--json`` and ``--no-record``; then, as notebook and report do, ``plan(params)``, ``run(plan,
on_progress=...)`` with a progress bar on stderr, ``record(result)``, and the exit status
from ``summarize(result)``, the one place a stage's verdict is decided:

* 0: the verdict is PASS or WARN; 1: it is FAIL;
* 2: a bad parameter, a missing file, a device that is not usable here, a results folder
  that cannot be written (named before the stage runs): one line (:mod:`._cli`);
* 130: stopped (Ctrl-C, SIGTERM, SIGHUP): the stage's run stops the processes it started,
  and the partial result it left on the exception is shown and recorded.

What differs between stages is how the result reads on a terminal and what the progress
bar counts: each stage's command module declares those, and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Sequence, cast

from hyport_lib import params
from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.results import ensure_results_dir
from hyport_lib.stages import StageContract, stage_part
from hyport_lib.utils.files import atomic_write_text, dumps_json
from hyport_lib.utils.redact import scrub_obj, scrub_text


@dataclass(frozen=True)
class StageCommand:
    """One stage's command line.

    Attributes:
        stage: the stage's package (``"inference"``): its ``params.Params`` and ``stage``.
        text: the result as the terminal shows it (scrubbed when printed).
        bar: makes the progress bar ``run`` feeds (a :class:`TerminalBar`).
        planning: the context the plan runs in (training shows a bar while its plan
            reads and tokenises the dataset).
        plan_lines: what the plan decided, one line each, said on stderr before it runs.
        json: the result as ``--json`` writes it (default: its ``to_dict()``).
        json_file: ``--json OUT`` writes the JSON to a file beside the text, instead of
            printing it instead of the text.
        recording_optional: ``--no-record`` is offered.
        positional: parameters given as positional arguments (``hyport verify PATH``).
        switches: boolean parameters that are off unless given here (``--reload``),
            where the notebook's defaults are on.
        arguments: flags of the command's own, added after the parameters.
        adjust: ``adjust(plan, args)`` -> the plan as the command's own flags change it
            (checked here, before the stage runs).
    """

    stage: str
    text: Callable[[Any], str]
    bar: Callable[[], Optional[TerminalBar]] = lambda: None
    planning: Callable[[], ContextManager] = contextlib.nullcontext
    plan_lines: Callable[[Any], Sequence[str]] = lambda plan: ()
    json: Callable[[Any], Any] = lambda result: result.to_dict()
    json_file: bool = False
    recording_optional: bool = True
    positional: Sequence[str] = ()
    switches: Sequence[str] = ()
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    adjust: Callable[[Any, argparse.Namespace], Any] = lambda plan, args: plan

    @property
    def contract(self) -> StageContract:
        return cast(StageContract, stage_part(self.stage, "stage"))

    @property
    def params_class(self) -> type:
        return stage_part(self.stage, "params").Params

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        cls = self.params_class
        params.add_arguments(parser, cls, positional=self.positional, skip=self.switches)
        for f in params.parameter_fields(cls):
            if f.name in self.switches:
                parser.add_argument(f.flag, dest=f.name, action="store_true",
                                    help=f"{f.spec.doc} (off unless given)")
        self.arguments(parser)
        if self.json_file:
            parser.add_argument("--json", metavar="OUT", help="also write the result as JSON to OUT")
        else:
            parser.add_argument("--json", action="store_true", help="print the full result as JSON")
        if self.recording_optional:
            parser.add_argument("--no-record", action="store_true",
                                help=f"do not write the {self.contract.STAGE} result file")

    def run(self, args: argparse.Namespace) -> int:
        stage = self.contract
        given = params.from_arguments(self.params_class, args)
        recording = not getattr(args, "no_record", False)
        if recording:
            # Named before anything runs: an hour's run never ends in a traceback about
            # where to write its result (the default log folders lie beside it, too).
            ensure_results_dir()
        with self.planning():
            plan = self.adjust(stage.plan(given), args)
        for line in self.plan_lines(plan):
            print(scrub_text(line), file=sys.stderr)
        bar = self.bar()
        if bar is None:
            return self._show(stage.run(plan), args, recording)
        return run_showing_partial(lambda: stage.run(plan, on_progress=bar), bar,
                                   lambda result: self._show(result, args, recording))

    def _show(self, result, args: argparse.Namespace, recording: bool) -> int:
        stage = self.contract
        summary = stage.summarize(result)
        payload = dumps_json(scrub_obj(self.json(result)), indent=1 if self.json_file else 2)
        if args.json and not self.json_file:
            print(scrub_text(payload))
        else:
            print(scrub_text(self.text(result)))
        if recording:
            print(f"result: {stage.record(result)}", file=sys.stderr)
        if args.json and self.json_file:
            atomic_write_text(args.json, scrub_text(payload))
        return 1 if summary.verdict == "FAIL" else 0
