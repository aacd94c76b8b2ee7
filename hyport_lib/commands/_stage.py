"""The one stage command (``hyport env | attention | infer | train | verify``): its flags are
the stage's ``Params`` plus ``--json`` and ``--no-record``, its work the stage contract. Exit
status: 0 on PASS or WARN, 1 on FAIL, 130 stopped (the partial result shown and recorded),
2 for a usage error (:mod:`._cli`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Sequence, TextIO, cast

from hyport_lib import params
from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.results import ensure_results_dir, record, recorded_data
from hyport_lib.stages import StageContract, stage_part
from hyport_lib.utils.files import atomic_write_text, dumps_json
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.wording import counted

Reader = Callable[[Any], Any]


#: Seconds between two progress lines where stderr is a log, not a terminal: a bar's
#: redraws, one per update, filled an inference log with 968 of them.
LOG_PROGRESS_INTERVAL_S = 5.0


class ProgressWriter:
    """A stage's ``on_progress`` on stderr. On a terminal, one tqdm bar; a new phase starts a
    new bar, labelled by it. Elsewhere (a log, a cluster job's output), plain lines with no
    carriage return: the first and the last of each phase, and one every
    :data:`LOG_PROGRESS_INTERVAL_S` between."""

    def __init__(self, desc: str, unit: str, *, total: Reader, done: Reader,
                 postfix: Optional[Reader] = None, phase: Optional[Reader] = None,
                 unit_scale: bool = False, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.desc, self.unit, self.unit_scale = desc, unit, unit_scale
        self._total, self._done, self._postfix, self._phase = total, done, postfix, phase
        self._stream, self._clock = stream, clock
        self.bar = None  # the tqdm bar, on a terminal
        self.current_phase = None
        self._lines: Optional[_LogLines] = None  # the phase's plain lines, elsewhere

    def __call__(self, progress) -> None:
        phase = self._phase(progress) if self._phase else None
        stream = self._stream or sys.stderr  # looked up late: a test's or a redirect's stderr
        if (self.bar is None and self._lines is None) or phase != self.current_phase:
            self.close()
            self.current_phase = phase
            if _is_terminal(stream):
                from tqdm import tqdm

                self.bar = tqdm(total=self._total(progress), file=stream, desc=phase or self.desc,
                                unit=self.unit, unit_scale=self.unit_scale)
            else:
                self._lines = _LogLines(stream, phase or self.desc, self.unit, self.unit_scale, self._clock)
        text = self._postfix(progress) if self._postfix is not None else ""
        if self._lines is not None:
            self._lines.update(self._done(progress), self._total(progress), text)
            return
        if text:
            self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(self._done(progress) - self.bar.n)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self._lines is not None:
            self._lines.close()
            self._lines = None


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file: not a terminal
        return False


class _LogLines:
    """One phase's progress as plain lines: the first update, then at most one line per
    :data:`LOG_PROGRESS_INTERVAL_S` (a heartbeat while nothing moves), and the last state,
    at the end or at close, unless a line already said it."""

    def __init__(self, stream: TextIO, label: str, unit: str, unit_scale: bool, clock: Callable[[], float]):
        self.stream, self.label, self.unit, self.unit_scale, self.clock = stream, label, unit, unit_scale, clock
        self.started = clock()
        self.written_at: Optional[float] = None
        self.written_state: Optional[tuple] = None  # (done, total, postfix) the last line said
        self.pending: Optional[tuple] = None  # the newest state

    def update(self, done, total, postfix: str) -> None:
        now = self.clock()
        self.pending = (done, total, postfix)
        finished = bool(total) and done >= total and self.pending != self.written_state
        if self.written_at is None or finished or now - self.written_at >= LOG_PROGRESS_INTERVAL_S:
            self._write(now)

    def close(self) -> None:
        if self.pending is not None and self.pending != self.written_state:
            self._write(self.clock())

    def _write(self, now: float) -> None:
        print(self._line(*self.pending, now - self.started), file=self.stream, flush=True)
        self.written_at, self.written_state = now, self.pending

    def _line(self, done, total, postfix: str, elapsed_s: float) -> str:
        if not total and not done:
            amount = ""  # a phase that counts nothing (a reload in a child process)
        elif self.unit_scale:
            amount = f"{_scaled(done, self.unit)} of {_scaled(total, self.unit)}" if total else _scaled(done, self.unit)
        else:
            amount = f"{done:,} of {counted(total, self.unit)}" if total else counted(done, self.unit)
        share = f" ({100 * done / total:.0f}%)" if total else ""
        said = f": {amount}{share}," if amount else ","
        return f"{self.label}{said} {elapsed_s:.0f}s" + (f", {postfix}" if postfix else "")


def _scaled(count: float, unit: str) -> str:
    """``count`` of ``unit`` with a decimal prefix (1.5 GB), as tqdm's ``unit_scale`` writes it."""
    prefix = ""
    for larger in ("k", "M", "G", "T"):
        if abs(count) < 1000:
            break
        count, prefix = count / 1000, larger
    return f"{count:.1f} {prefix}{unit}" if prefix else f"{count:.0f} {unit}"


@dataclass(frozen=True)
class StageCommand:
    """One stage's command line: what differs between stages is how the result reads on
    a terminal (``text``, scrubbed when printed) and what the progress bar counts."""

    stage: str  # the stage's package ("inference")
    text: Callable[[Any], str]
    bar: Callable[[], Optional[ProgressWriter]] = lambda: None
    planning: Callable[[], ContextManager] = contextlib.nullcontext  # around the plan (training's dataset bar)
    plan_lines: Callable[[Any], Sequence[str]] = lambda plan: ()  # what the plan decided, said on stderr
    json: Optional[Callable[[Any], Any]] = None  # the result as --json writes it (None: as recorded)
    json_file: bool = False  # --json OUT: the JSON to a file, the text printed
    recording_optional: bool = True
    positional: Sequence[str] = ()  # parameters given as positional arguments (hyport verify PATH)
    switches: Sequence[str] = ()  # booleans off unless given (--reload) where the notebook's are on
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None  # own flags, for ``adjust``
    adjust: Callable[[Any, argparse.Namespace], Any] = lambda plan, args: plan

    @property
    def contract(self) -> StageContract:
        return cast(StageContract, stage_part(self.stage, "stage"))

    @property
    def params_class(self) -> type:
        return stage_part(self.stage, "params").Params

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        params.add_arguments(parser, self.params_class, positional=self.positional, switches=self.switches)
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
            return self._show(stage.run(plan), args, given, recording)
        return run_showing_partial(lambda: stage.run(plan, on_progress=bar), bar,
                                   lambda result: self._show(result, args, given, recording))

    def _show(self, result, args: argparse.Namespace, given, recording: bool) -> int:
        stage = self.contract
        summary = stage.summarize(result)
        # Scrubbed once, as text: every value whatever type dumps_json wrote it from, in every
        # encoded form (JSON escapes included).
        payload = None
        if args.json:
            data = self.json(result) if self.json is not None else recorded_data(stage, result)
            payload = scrub_text(dumps_json(data, indent=1 if self.json_file else 2))
        if payload is not None and not self.json_file:
            print(payload)
        else:
            print(scrub_text(self.text(result)))
        if recording:
            print(f"result: {record(stage, result, params=given)}", file=sys.stderr)
        if payload is not None and self.json_file:
            atomic_write_text(args.json, payload)
        return 1 if summary.verdict == "FAIL" else 0
