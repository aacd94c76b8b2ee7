"""Running one stage's notebook with papermill, and collecting what it left.

The executed notebook is saved in ``<run>/.partial/`` after every cell; only its scrubbed
copy reaches ``notebooks/`` (a killed run's partial file is removed by
:func:`~hyport_lib.report.runner.clean_runs`). What the kernel writes to the terminal goes to the
stage's log, scrubbed like the rest.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import time
from pathlib import Path
from typing import Optional

from hyport_lib.report.html import notebook_to_html
from hyport_lib.report.run_parameters import safe_parameters
from hyport_lib.report.run import RESULTS_DIR, StageOutcome, run_folder_env
from hyport_lib.results import load_record, result_file
from hyport_lib.stages import Stage
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_json_text, scrub_text
from hyport_lib.utils.signals import shielded

PARTIAL_DIR = ".partial"
INTERRUPTED_ERROR = "KeyboardInterrupt: the run was interrupted during this stage"
#: The summary of a stage that failed without recording one (the runner's words, not the stage's).
FAILED_SUMMARY = "stage failed"


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub_text(str(record.getMessage()))
        record.args = ()
        return True


@contextlib.contextmanager
def _stage_logging(log_path: Path):
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    handler.addFilter(_ScrubFilter())
    logger = logging.getLogger("papermill")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()


def _describe_error(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None)
    evalue = getattr(exc, "evalue", None)
    text = f"{ename}: {evalue}" if ename else f"{type(exc).__name__}: {exc}"
    return scrub_text(text.strip())


def sweep_partial(run_dir: Path) -> list[str]:
    """Scrub every notebook left in ``<run>/.partial/`` into ``<run>/notebooks/`` and remove
    it (a stop signal between a stage's end and its collection); the names swept."""
    swept = []
    for source in sorted((Path(run_dir) / PARTIAL_DIR).glob("*.ipynb")):
        scrub_notebook(source, Path(run_dir) / "notebooks" / source.name)
        source.unlink()
        swept.append(source.name)
    return swept


def scrub_notebook(source: Path, target: Path) -> bool:
    """Write ``source`` (an executed notebook) scrubbed to ``target`` (by structure, so it
    stays valid JSON; as text when half-written); False when absent."""
    if not source.exists():
        return False
    text = source.read_text(encoding="utf-8", errors="replace")
    atomic_write_text(target, scrub_json_text(text, indent=1))
    return True


@contextlib.contextmanager
def _terminal_to_log(log_path: Path):
    """Send this process's stderr (fd 2, which the kernel inherits) to the log: the
    kernel's own messages ("Kernel is running over TCP without encryption", the tracebacks
    of a kernel stopped by a signal) land there, scrubbed afterwards, not on the terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        # A stopped kernel leaves asyncio tasks whose "exception was never retrieved"
        # is printed when they are collected: collect them while stderr is the log.
        gc.collect()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def scrub_file(path: Path) -> None:
    """Scrub a text file of a run in place: JSON (a notebook too) by structure, else as text."""
    text = path.read_text(encoding="utf-8", errors="replace")
    clean = (scrub_json_text(text, indent=1 if path.suffix == ".ipynb" else 2)
             if path.suffix in (".json", ".ipynb") else scrub_text(text))
    if clean != text:
        atomic_write_text(path, clean)


def run_stage(stage: Stage, run_dir: Path, params: dict, *, cell_timeout_s: int,
              kernel_name: Optional[str], show_inputs: bool, progress_bar: bool,
              outcome: Optional[StageOutcome] = None) -> StageOutcome:
    """Execute one notebook and collect everything it left; never raises for the notebook's errors.

    ``outcome`` (the run's row for this stage) is filled in place, so that the caller
    keeps the links to the stage's files even when a further stop signal ends this call.
    """
    import papermill

    nb_out = run_dir / "notebooks" / stage.path.name
    nb_partial = run_dir / PARTIAL_DIR / stage.path.name
    html_out = run_dir / "html" / f"{stage.id}.html"
    log_out = run_dir / "logs" / f"{stage.id}.log"
    for folder in (nb_out.parent, nb_partial.parent, html_out.parent, log_out.parent,
                   run_dir / RESULTS_DIR):
        folder.mkdir(parents=True, exist_ok=True)
    outcome = outcome if outcome is not None else StageOutcome(stage=stage.id, verdict="FAIL")
    outcome.verdict = "FAIL"
    outcome.parameters = outcome.parameters or safe_parameters(params)  # the runner's, with defaults
    outcome.notebook = str(nb_out.relative_to(run_dir))
    outcome.log = str(log_out.relative_to(run_dir))
    started = time.monotonic()
    error = None
    try:
        with _stage_logging(log_out), run_folder_env(run_dir), _terminal_to_log(log_out):
            try:
                papermill.execute_notebook(
                    str(stage.path), str(nb_partial), parameters=params, kernel_name=kernel_name,
                    cwd=str(stage.path.parent), execution_timeout=cell_timeout_s,
                    progress_bar=progress_bar, log_output=True, request_save_on_cell_execute=True,
                )
            except KeyboardInterrupt:
                # Keep what the stage left (scrubbed, with its HTML); the caller stops the run.
                error = INTERRUPTED_ERROR
                outcome.interrupted = True
            except Exception as exc:  # noqa: BLE001 — any notebook failure becomes a FAIL row
                error = _describe_error(exc)
    except KeyboardInterrupt:
        # A further Ctrl-C while the stage's logging and terminal were being put back: the
        # stage's files are still collected (the unscrubbed notebook never stays behind).
        error, outcome.interrupted = error or INTERRUPTED_ERROR, True
    outcome.duration_s = round(time.monotonic() - started, 2)
    with shielded():  # a second Ctrl-C does not leave the stage's files half-made
        return _collect(stage, run_dir, outcome, error, nb_partial, nb_out, html_out, log_out,
                        show_inputs)


def _collect(stage: Stage, run_dir: Path, outcome: StageOutcome, error: Optional[str],
             nb_partial: Path, nb_out: Path, html_out: Path, log_out: Path,
             show_inputs: bool) -> StageOutcome:
    if log_out.is_file():
        scrub_file(log_out)
    if scrub_notebook(nb_partial, nb_out):
        nb_partial.unlink()
        try:
            notebook_to_html(nb_out, html_out, run_dir=run_dir, show_inputs=show_inputs, title=stage.id)
            outcome.html = str(html_out.relative_to(run_dir))
        except Exception as exc:  # noqa: BLE001 — keep the stage row even if export fails
            error = (error + "; " if error else "") + f"HTML export failed: {_describe_error(exc)}"
    else:
        outcome.notebook = None
    result_path = result_file(run_dir / RESULTS_DIR, stage.id)
    if result_path.exists():
        try:
            result = load_record(result_path)
            outcome.verdict, outcome.summary = result.verdict, result.summary
            outcome.headline, outcome.provenance = result.headline, result.provenance
        except ValueError as exc:
            error = (error + "; " if error else "") + str(exc)
    elif error is None:
        outcome.verdict, outcome.summary = "WARN", "the notebook ran but recorded no result"
    if error:
        outcome.verdict, outcome.error = "FAIL", error
        outcome.summary = outcome.summary or FAILED_SUMMARY
    return outcome
