"""Run the stage notebooks with papermill and assemble ``outputs/<run-id>/``.

Layout of a run folder::

    outputs/<run-id>/
      index.html            summary table, parameters, versions (self-contained)
      run.json              the same, machine-readable
      blog.md, blog.zh.md   blog-post drafts (English, Chinese) built from the results
      notebooks/NN_x.ipynb  executed notebooks (secrets scrubbed)
      html/NN_x.html        offline HTML of each
      results/NN_x.json     what each notebook recorded (hyport_lib.results)
      logs/NN_x.log         cell outputs streamed by papermill

A stage that fails still leaves its notebook, HTML and log; the next stages run; the
index shows FAIL with the exception; the command exits non-zero.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from hyport_lib.parameters import rename_keys
from hyport_lib.report.run import ReportRun, StageOutcome, new_run_dir  # noqa: F401 (re-exported)
from hyport_lib.results import RESULTS_DIR_ENV, load_result
from hyport_lib.stages import Stage, discover_stages, select_stages
from hyport_lib.utils.files import atomic_write_json, atomic_write_text
from hyport_lib.utils.redact import is_secret_name, scrub_obj, scrub_text

#: Per-cell limit; papermill would otherwise wait forever on a hung cell.
DEFAULT_CELL_TIMEOUT_S = 1800
RUN_DIR_ENV = "HYPORT_RUN_DIR"
# Parameters whose string values are paths: made absolute against the caller's cwd,
# because the notebooks run with their own folder as working directory.
_PATH_SUFFIXES = ("_path", "_dir", "_file")
_PATH_KEYS = ("image",)


def notebook_parameters(stage: Stage) -> dict[str, str]:
    """Parameter names of the notebook's ``parameters`` cell -> inferred type name.

    papermill's own inspection is used (the same parser that injects values), so a
    name it cannot see is caught by the notebook-hygiene test, not here.
    """
    import papermill

    specs = papermill.inspect_notebook(str(stage.path))
    return {name: spec.get("inferred_type_name") or "None" for name, spec in specs.items()}


def coerce_overrides(raw: dict, types: dict[str, str]) -> dict:
    """``-p`` values: kept as typed text for string parameters, parsed as YAML otherwise.

    A prompt such as ``Translate: hello`` or ``yes`` must reach a string parameter as
    written, while ``num_cards=4`` or ``allow_busy_cards=true`` need their YAML types.
    """
    from hyport_lib.report.profiles import parse_yaml_value

    return {key: value if types.get(key) == "str" or not isinstance(value, str)
            else parse_yaml_value(key, value) for key, value in raw.items()}


def absolutize_paths(params: dict, base: Path) -> dict:
    """Relative paths made absolute against ``base`` (the caller's working directory).

    ``*_dir`` parameters are output folders: always resolved, they may not exist yet.
    ``*_path`` / ``*_file`` / ``image`` are resolved when they exist there, so names
    such as ``tiny`` or a hub id pass unchanged.
    """
    out = {}
    for key, value in params.items():
        if isinstance(value, str) and value and not os.path.isabs(value):
            if key.endswith("_dir") or (
                    (key.endswith(_PATH_SUFFIXES) or key in _PATH_KEYS) and (base / value).exists()):
                value = str((base / value).resolve())
        out[key] = value
    return out


def safe_parameters(params: dict) -> dict:
    """Parameters fit to print: secret-named keys dropped, values scrubbed."""
    return {k: (scrub_text(v) if isinstance(v, str) else v)
            for k, v in params.items() if not is_secret_name(k)}


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


@contextlib.contextmanager
def _environ(extra: dict):
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _describe_error(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None)
    evalue = getattr(exc, "evalue", None)
    text = f"{ename}: {evalue}" if ename else f"{type(exc).__name__}: {exc}"
    return scrub_text(text.strip())


def _scrub_notebook(path: Path) -> None:
    """Scrub secrets from every string of an executed notebook (structure, not text:
    a value with quotes or non-ASCII characters is escaped in the JSON text)."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        clean = scrub_text(text)  # half-written by a dying kernel: scrub what is there
    else:
        clean = json.dumps(scrub_obj(data), indent=1, ensure_ascii=False) + "\n"
    if clean != text:
        atomic_write_text(path, clean)


def run_stage(stage: Stage, run_dir: Path, params: dict, *, cell_timeout_s: int,
              kernel_name: Optional[str], show_inputs: bool, progress_bar: bool) -> StageOutcome:
    """Execute one notebook and collect everything it left; never raises for the notebook's errors."""
    import papermill

    from hyport_lib.report.html import notebook_to_html

    nb_out = run_dir / "notebooks" / stage.path.name
    html_out = run_dir / "html" / f"{stage.id}.html"
    log_out = run_dir / "logs" / f"{stage.id}.log"
    for folder in (nb_out.parent, html_out.parent, log_out.parent, run_dir / "results"):
        folder.mkdir(parents=True, exist_ok=True)
    outcome = StageOutcome(stage=stage.id, verdict="FAIL", parameters=safe_parameters(params),
                           notebook=str(nb_out.relative_to(run_dir)),
                           log=str(log_out.relative_to(run_dir)))
    env = {RESULTS_DIR_ENV: str(run_dir / "results"), RUN_DIR_ENV: str(run_dir),
           "HYPORT_STAGE": stage.id}
    started = time.monotonic()
    error = None
    with _stage_logging(log_out), _environ(env):
        try:
            papermill.execute_notebook(
                str(stage.path), str(nb_out), parameters=params, kernel_name=kernel_name,
                cwd=str(stage.path.parent), execution_timeout=cell_timeout_s,
                progress_bar=progress_bar, log_output=True, request_save_on_cell_execute=True,
            )
        except KeyboardInterrupt:
            # Keep what the stage left (scrubbed, with its HTML); the caller stops the run.
            error = "KeyboardInterrupt: the run was interrupted during this stage"
            outcome.interrupted = True
        except Exception as exc:  # noqa: BLE001 — any notebook failure becomes a FAIL row
            error = _describe_error(exc)
    outcome.duration_s = round(time.monotonic() - started, 2)
    _scrub_notebook(nb_out)
    if nb_out.exists():
        try:
            notebook_to_html(nb_out, html_out, show_inputs=show_inputs, title=stage.id)
            outcome.html = str(html_out.relative_to(run_dir))
        except Exception as exc:  # noqa: BLE001 — keep the stage row even if export fails
            error = (error + "; " if error else "") + f"HTML export failed: {_describe_error(exc)}"
    else:
        outcome.notebook = None
    result_path = run_dir / "results" / f"{stage.id}.json"
    if result_path.exists():
        try:
            result = load_result(result_path)
            outcome.verdict, outcome.summary = result.verdict, result.summary
            outcome.headline, outcome.provenance = result.headline, result.provenance
        except ValueError as exc:
            error = (error + "; " if error else "") + str(exc)
    elif error is None:
        outcome.verdict, outcome.summary = "WARN", "the notebook ran but recorded no result"
    if error:
        outcome.verdict, outcome.error = "FAIL", error
        outcome.summary = outcome.summary or "stage failed"
    return outcome


def run_report(*, profile: Optional[str] = None, overrides: Optional[dict] = None,
               only: Optional[Iterable[str]] = None, output_root: Optional[Path] = None,
               notebooks_dir: Optional[Path] = None, cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
               kernel_name: Optional[str] = None, show_inputs: bool = True,
               progress: Optional[Callable[[str], None]] = None,
               progress_bar: bool = False) -> ReportRun:
    """Run the selected stages and write the run folder. See the module docstring."""
    from hyport_lib.report.profiles import load_profile, resolve_profile
    from hyport_lib.environment import collect_versions

    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    profile_path = resolve_profile(profile)
    from_profile = rename_keys(load_profile(profile_path), say)
    overrides = rename_keys(overrides or {}, say)
    all_stages = discover_stages(notebooks_dir)
    stages = select_stages(all_stages, only)
    declared = {s.id: notebook_parameters(s) for s in all_stages}
    types: dict[str, str] = {}
    for stage_types in declared.values():
        for key, kind in stage_types.items():
            types.setdefault(key, kind)
    # A key is known when a notebook declares it or the profile names it (a profile may
    # carry settings of a stage that is not there yet: they are listed as unused).
    unknown = sorted(k for k in (overrides or {}) if k not in types and k not in from_profile)
    if unknown:
        raise ValueError(f"-p {', '.join(unknown)}: no notebook declares such a parameter "
                         f"and the profile does not name it (known: {', '.join(sorted(types))})")
    merged = {**from_profile, **coerce_overrides(overrides or {}, types)}
    merged = absolutize_paths(merged, Path.cwd())
    output_root = (Path(output_root) if output_root else Path.cwd() / "outputs").resolve()
    run_id, run_dir = new_run_dir(output_root)
    run = ReportRun(
        run_id=run_id, run_dir=run_dir, profile=str(profile_path) if profile_path else None,
        parameters=safe_parameters(merged), stages=[], versions=collect_versions(),
        started=_dt.datetime.now().isoformat(timespec="seconds"),
        unused_parameters=sorted(k for k in merged if k not in types),
    )
    say(f"hyport report {run_id}: {len(stages)} stage(s) -> {run_dir}")
    for i, stage in enumerate(stages, 1):
        params = {k: v for k, v in merged.items() if k in declared[stage.id]}
        say(f"[{i}/{len(stages)}] {stage.id} ...")
        outcome = run_stage(stage, run_dir, params, cell_timeout_s=cell_timeout_s,
                            kernel_name=kernel_name, show_inputs=show_inputs,
                            progress_bar=progress_bar)
        run.stages.append(outcome)
        detail = f" - {outcome.error}" if outcome.error else (f" - {outcome.summary}" if outcome.summary else "")
        say(f"[{i}/{len(stages)}] {stage.id} {outcome.verdict} ({outcome.duration_s:.1f}s){detail}")
        # Everything is rewritten after every stage: an interrupted run still has it all.
        _write_run_files(run)
        if outcome.interrupted:
            say(f"interrupted; partial report: {run_dir / 'index.html'}")
            raise KeyboardInterrupt
    say(f"index: {run_dir / 'index.html'}")
    return run


def _write_run_files(run: ReportRun) -> None:
    from hyport_lib.report.blog import write_blog_drafts
    from hyport_lib.report.index import write_index

    run.finished = _dt.datetime.now().isoformat(timespec="seconds")
    write_index(run)
    atomic_write_json(run.run_dir / "run.json", scrub_obj(run.to_dict()))
    write_blog_drafts(run)
