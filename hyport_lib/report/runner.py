"""Run the stage notebooks with papermill and assemble ``outputs/<run-id>/``.

Layout of a run folder::

    outputs/<run-id>/
      index.html            summary table, parameters, versions (self-contained)
      run.json              the same, machine-readable
      report.html           index and every stage page in one offline file, to send
      blog.md, blog.en.md, blog.zh.md   blog-post drafts (English twice, Chinese) from the results
      figures/*.png         the drafts' figures, each drawn by its stage
      notebooks/NN_x.ipynb  executed notebooks (secrets scrubbed)
      html/NN_x.html        offline HTML of each
      results/NN_x.json     what each notebook recorded (hyport_lib.results)
      logs/NN_x.log         cell outputs streamed by papermill, and the kernel's messages

Before anything runs, the parameters are checked (:mod:`~hyport_lib.report.run_parameters`) and
runs killed earlier are cleaned (:mod:`~hyport_lib.report.cleanup`). ``run.json`` and the
index are written at the start (every stage ``PENDING``) and whenever a stage starts and
ends, so any end of the run leaves a true picture (a SIGKILL leaves ``RUNNING``, which the
next run marks ``INTERRUPTED``). A failed stage keeps its files and the next stages run.
A stop signal marks the stage ``INTERRUPTED`` and writes the files, which a second signal
does not cut short. Whatever ends the run, the folder is left with neither ``.partial/``
nor ``.runner.lock`` (:func:`~hyport_lib.report.cleanup.release_run_folder`).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

from hyport_lib.report.cleanup import clean_runs, hold_run_lock, process_start_time, release_run_folder
from hyport_lib.report.run_parameters import check_before_running, resolve_parameters, safe_parameters
from hyport_lib.report.profiles import load_profile, resolve_profile
from hyport_lib.report.run import NOT_RUN, PENDING, RUNNING, ReportRun, StageOutcome, new_run_dir
from hyport_lib.report.run_files import write_run_files
from hyport_lib.report.stage_run import FAILED_SUMMARY, run_stage, sweep_partial
from hyport_lib.results import INTERRUPTED
from hyport_lib.stages import discover_stages, select_stages
from hyport_lib.utils.files import ensure_writable
from hyport_lib.utils.imports import collect_versions
from hyport_lib.utils.signals import shielded

#: Per-cell limit; papermill would otherwise wait forever on a hung cell.
DEFAULT_CELL_TIMEOUT_S = 1800


def check_output_root(output_root: Path) -> Path:
    """The output root, created and writable, or a PermissionError naming it."""
    output_root = Path(output_root).resolve()
    if output_root.exists() and not output_root.is_dir():
        raise NotADirectoryError(20, f"--output-dir {str(output_root)!r} is a file, not a folder",
                                 str(output_root))
    try:
        ensure_writable(output_root)
    except OSError as exc:
        raise PermissionError(exc.errno, f"--output-dir {str(output_root)!r} is not writable "
                                         f"({exc.strerror})", str(output_root)) from None
    return output_root


def check_kernel(name: Optional[str]) -> None:
    """``--kernel``: a Jupyter kernel that is installed, checked before any stage runs."""
    if not name:
        return
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        manager.get_kernel_spec(name)
    except NoSuchKernel:
        installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise ValueError(f"--kernel {name!r}: no such Jupyter kernel (installed: {installed})") from None


def run_report(*, profile: Optional[str] = None, overrides: Optional[dict] = None,
               only: Optional[Iterable[str]] = None, output_root: Optional[Path] = None,
               notebooks_dir: Optional[Path] = None, cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
               kernel_name: Optional[str] = None, show_inputs: bool = True,
               progress: Optional[Callable[[str], None]] = None,
               progress_bar: bool = False, allow_unknown_parameters: bool = False) -> ReportRun:
    """Run the selected stages and write the run folder (see the module docstring)."""
    say = progress or _say
    profile_path = resolve_profile(profile)
    all_stages = discover_stages(notebooks_dir)
    if not all_stages:
        raise FileNotFoundError(f"no stage notebooks (NN_name.ipynb) in {notebooks_dir or 'notebooks/'}")
    stages = select_stages(all_stages, only)
    from_profile = load_profile(profile_path)
    params = resolve_parameters(
        from_profile, overrides or {}, all_stages,
        profile_name=f"profile {profile_path.name}" if profile_path else "profile",
        allow_unknown=allow_unknown_parameters)
    for problem in check_before_running(params, stages):
        # the host, not a value: the stage meets it when it runs, and 01 explains it
        say(f"note: {problem} (the stage will fail on it; the others run)")
    check_kernel(kernel_name)
    output_root = check_output_root(Path(output_root) if output_root else Path.cwd() / "outputs")
    clean_runs(output_root, say)
    versions = collect_versions()
    run_id, run_dir = new_run_dir(output_root)
    lock = None
    try:  # from the folder's first moment: a stop at any point below leaves no lock behind
        lock = hold_run_lock(run_dir)  # held until this function returns: the run is alive
        run = ReportRun(
            run_id=run_id, run_dir=run_dir, profile=str(profile_path) if profile_path else None,
            parameters=safe_parameters(params.merged),
            stages=[StageOutcome(stage=s.id, verdict=PENDING, parameters=safe_parameters(params.effective(s)))
                    for s in stages],
            versions=versions, started=_now(), unused_parameters=params.unused,
            pid=os.getpid(), pid_started=process_start_time(os.getpid()) or 0.0,
            host=socket.gethostname(), left_out=[s.id for s in all_stages if s not in stages],
            parameter_sources={k: "-p" if k in (overrides or {}) else "profile" for k in params.merged
                               if k in (overrides or {}) or k in from_profile})
        return _run_stages(run, stages, params, say, cell_timeout_s=cell_timeout_s,
                           kernel_name=kernel_name, show_inputs=show_inputs,
                           progress_bar=progress_bar)
    finally:
        with shielded():
            release_run_folder(run_dir, lock)


def _run_stages(run: ReportRun, stages, params, say, **stage_options) -> ReportRun:
    run_dir = run.run_dir
    write_run_files(run)
    say(f"hyport report {run.run_id}: {len(stages)} stage(s) -> {run_dir}")
    current = None
    try:
        for i, stage in enumerate(stages, 1):
            current = i - 1
            run.stages[current].verdict = RUNNING
            with shielded():
                write_run_files(run, blog=False)
            outcome = run_stage(stage, run_dir, params.for_stage(stage), outcome=run.stages[current],
                                **stage_options)
            if outcome.interrupted:
                outcome.verdict = INTERRUPTED
                if outcome.summary == FAILED_SUMMARY:
                    outcome.summary = "stage interrupted"
            run.stages[current] = outcome
            current = None
            # One line per stage: a long error (a cell timeout quotes the cell) is in the
            # stage's log and the index; the terminal gets its first line.
            said = outcome.error or outcome.summary
            detail = f" - {(said.strip().splitlines() or [''])[0][:300]}" if said else ""
            say(f"[{i}/{len(stages)}] {stage.id} {outcome.verdict} ({outcome.duration_s:.1f}s){detail}")
            if outcome.interrupted:
                raise KeyboardInterrupt
            with shielded():
                write_run_files(run)
    except BaseException:
        # Stopped (or a bug): the stage under way is INTERRUPTED, the rest NOT RUN, and
        # the files say so; a further stop signal waits until they are written.
        with shielded():
            sweep_partial(run_dir)  # a stop signal that came between a stage's end and its collection
            if current is not None:
                run.stages[current].verdict = INTERRUPTED
                run.stages[current].error = run.stages[current].error or "the run was stopped during this stage"
            for outcome in run.stages:
                if outcome.verdict == PENDING:
                    outcome.verdict = NOT_RUN
            run.status, run.finished = "interrupted", _now()
            write_run_files(run)
        say(f"interrupted; partial report: {run_dir / 'index.html'}")
        raise
    run.status, run.finished = "finished", _now()
    with shielded():
        write_run_files(run)
    say(f"index: {run_dir / 'index.html'}")
    return run


_TERMINAL = {"gone": False}


def _say(message: str) -> None:
    # A terminal that went away (`| head`, a closed ssh session) must not stop the run:
    # the files say everything the terminal would have.
    if _TERMINAL["gone"]:
        return
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        _TERMINAL["gone"] = True


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")
