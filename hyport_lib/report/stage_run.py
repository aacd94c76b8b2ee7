"""Running one stage's notebook with papermill, and collecting what it left.

The executed notebook is saved in ``<run>/.partial/`` after every cell; only its scrubbed
copy reaches ``notebooks/`` (a killed run's is removed by the next run). What the kernel
writes to the terminal goes to the stage's log, scrubbed like the rest.

The stage's page is offline HTML: nbconvert's widget renderer comes from a CDN that
air-gapped clusters cannot reach, so widget views become a note (every notebook shows a
static rendering next to each widget), and the template has no require.js / MathJax /
mermaid / widget scripts.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from hyport_lib.devices.out_of_memory import DescendantWatch
from hyport_lib.processes import HF_PROGRESS_BARS_OFF
from hyport_lib.report.breaks import breakable_cells
from hyport_lib.report.paths import relative_text
from hyport_lib.report.run import RESULTS_DIR, StageOutcome, run_folder_env
from hyport_lib.report.run_parameters import safe_parameters
from hyport_lib.results import load_record, result_file
from hyport_lib.stages import Stage
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_json_text, scrub_text
from hyport_lib.utils.signals import shielded

if TYPE_CHECKING:
    import nbformat

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
    """Scrub every notebook left in ``<run>/.partial/`` (a stop signal between a stage's end
    and its collection) into ``<run>/notebooks/``; the names swept."""
    swept = []
    for source in sorted((Path(run_dir) / PARTIAL_DIR).glob("*.ipynb")):
        scrub_file(source, Path(run_dir) / "notebooks" / source.name)
        source.unlink()
        swept.append(source.name)
    return swept


def scrub_file(path: Path, target: Optional[Path] = None) -> bool:
    """``path`` scrubbed into ``target`` (in place by default, written only when changed):
    JSON and notebooks by structure, so that they stay valid JSON (as text when
    half-written), anything else as text. False when ``path`` is absent."""
    if not path.exists():
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    clean = (scrub_json_text(text, indent=1 if path.suffix == ".ipynb" else 2)
             if path.suffix in (".json", ".ipynb") else scrub_text(text))
    if target is not None or clean != text:
        atomic_write_text(target or path, clean)
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


def run_stage(stage: Stage, run_dir: Path, params: dict, *, cell_timeout_s: int,
              kernel_name: Optional[str], show_inputs: bool, progress_bar: bool,
              outcome: Optional[StageOutcome] = None, job_dir: Optional[Path] = None) -> StageOutcome:
    """Execute one notebook and collect everything it left; the notebook's errors are a
    FAIL, never raised. ``outcome`` (the run's row) is filled in place, so that the caller
    keeps the links to the stage's files even when a further stop signal ends this call.
    ``job_dir``: the run folder the stage sees (its outputs go under it) when this node's
    files go elsewhere (``run_dir``: ``<run>/nodes/node<K>``); default ``run_dir``."""
    import papermill
    from nbclient.exceptions import DeadKernelError

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
        # The kernel's output is the stage's log too (papermill logs every output): no model
        # loading bar redraws there. Not tqdm's TQDM_DISABLE: tqdm reads it once, when first
        # imported, so set in this process it could turn off the report's own bar for good.
        stage_env = run_folder_env(job_dir or run_dir, HF_PROGRESS_BARS_OFF, results=run_dir / RESULTS_DIR)
        with _stage_logging(log_out), stage_env, _terminal_to_log(log_out), \
                DescendantWatch() as memory:  # the kernel's and its workers' memory, for a dead kernel
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
            except DeadKernelError as exc:  # killed: no traceback, so the memory evidence says why
                error = f"{_describe_error(exc)}; {memory.diagnose()}"
            except Exception as exc:  # noqa: BLE001 — any notebook failure becomes a FAIL row
                error = _describe_error(exc)
    except KeyboardInterrupt:
        # A further Ctrl-C while the stage's logging and terminal were being put back: the
        # stage's files are still collected (the unscrubbed notebook never stays behind).
        error, outcome.interrupted = error or INTERRUPTED_ERROR, True
    outcome.duration_s = round(time.monotonic() - started, 2)
    with shielded():  # a second Ctrl-C does not leave the stage's files half-made
        return _collect(stage, run_dir, outcome, error, nb_partial, nb_out, html_out, log_out,
                        show_inputs, job_dir or run_dir)


def _collect(stage: Stage, run_dir: Path, outcome: StageOutcome, error: Optional[str],
             nb_partial: Path, nb_out: Path, html_out: Path, log_out: Path,
             show_inputs: bool, job_dir: Path) -> StageOutcome:
    scrub_file(log_out)
    if scrub_file(nb_partial, nb_out):
        nb_partial.unlink()
        try:
            notebook_to_html(nb_out, html_out, run_dir=job_dir, show_inputs=show_inputs, title=stage.id)
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


# --------------------------------------------------------------------------- the stage's page
TEMPLATE_DIR = Path(__file__).parent / "templates"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ("[interactive widget: live in JupyterLab only; "
               "its static rendering is shown next to it]")


def staticize_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data and WIDGET_MIME in data:
                output["data"] = {"text/plain": WIDGET_NOTE}
    return nb


def nbconvert_template_dirs() -> list[str]:
    """Folders holding nbconvert's own templates, wherever pip put them: ``pip install
    --target DIR`` (seen on a GPU host) puts them in ``DIR/share/jupyter``, where jupyter does
    not look ("No template sub-directory with name 'lab' found")."""
    import nbconvert
    from jupyter_core.paths import jupyter_path

    candidates = [Path(p) for p in jupyter_path("nbconvert", "templates")]
    package = Path(nbconvert.__file__).resolve().parent
    for up in (package.parent, *package.parents[:4]):  # site-packages, lib, prefix, ...
        candidates.append(up / "share" / "jupyter" / "nbconvert" / "templates")
    found = list(dict.fromkeys(str(c) for c in candidates if (c / "lab").is_dir()))
    if not found:
        raise RuntimeError("nbconvert's 'lab' template was not found next to nbconvert "
                           f"({package}) nor on the Jupyter data path; set JUPYTER_PATH to the "
                           "folder that holds nbconvert/templates/lab (e.g. <prefix>/share/jupyter)")
    return found


def notebook_to_html(notebook_path: Path, html_path: Path, *, run_dir: Path, show_inputs: bool = True,
                     title: str | None = None) -> Path:
    """Its paths relative to ``run_dir`` (the notebook keeps them absolute)."""
    # Imported when a page is written, as nbconvert is: nbformat brings jsonschema, whose
    # format checkers build an RFC 3987 grammar on import (~3 s), which a report refusing
    # its input before any stage runs should not wait for.
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook_path), as_version=4)
    nb = staticize_widgets(nb)
    exporter = HTMLExporter(
        template_name="hyport_offline",
        extra_template_basedirs=[str(TEMPLATE_DIR), *nbconvert_template_dirs()],
        exclude_input=not show_inputs,
        exclude_input_prompt=not show_inputs,
    )
    resources = {"metadata": {"name": title or Path(notebook_path).stem}}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    # breakable_cells: printed, a wide table wraps between words, never inside one
    return atomic_write_text(html_path, breakable_cells(relative_text(scrub_text(body), run_dir, "html")))
