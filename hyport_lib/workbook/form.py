"""A form per stage, made from its ``Params`` class: the workbook's interactive front door.

Each field gets the control its declaration asks for, its doc as the tooltip, and a line
under it for its error. Values go through :func:`hyport_lib.params.parse_text` and the class
itself, the one path the command line and the report use, so a bad value gets the same
one-line error here, and so does a value the stage's plan refuses. The form starts from the
notebook's namespace (the ``parameters`` cell stays the papermill source); headless runs
never build it.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping, Optional, Sequence

import yaml

from hyport_lib.display import verdict_label
from hyport_lib.params import Field, ParameterError, StageParams, parameter_fields, parse_text
from hyport_lib.results import INTERRUPTED, RUN_DIR_ENV, StageSummary, record
from hyport_lib.stages import StageContract
from hyport_lib.utils.bounded_files import read_text
from hyport_lib.utils.printable import USAGE_ERRORS, first_line, one_line, shortened
from hyport_lib.utils.redact import scrub_text
from hyport_lib.workbook.form_run import FormRun
from hyport_lib.workbook.stop import run_stoppable
from hyport_lib.utils.wording import counted

#: What a stage's "Run stage" button calls with the checked parameters: it runs the stage,
#: shows and records the result, and returns the recorded verdict.
RunStage = Callable[[StageParams], StageSummary]

#: A field that names an entry of the LLaMA-Factory ``dataset_info.json`` another field names:
#: its presets are that file's entries.
ENTRY_OF = {"dataset": "dataset_path"}
#: A dataset_info.json lists entries (a few KB); a larger file offers none.
_MAX_INFO_BYTES = 2**20

#: A problem's parameter: the text before ``=`` or ``:`` that opens it
#: (``max_steps=-3: expected ...``, ``dataset: no such entry``).
_PROBLEM_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[=:]")

#: A number box is as wide as a short path: the labels are the field names.
_LABEL_STYLE = {"description_width": "14em"}
_WIDE = {"width": "46em"}


def model_folders(root: Path, limit: int = 200) -> list[str]:
    """Checkpoint folders (holding a ``config.json``) under ``root``, two levels deep at
    most, links not followed out of ``root``."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return []
    found: list[str] = []
    for depth in ("*/config.json", "*/*/config.json"):
        for config in sorted(root.glob(depth)):
            folder = config.parent
            if folder.is_symlink() or any(p.is_symlink() for p in folder.relative_to(root).parents
                                          if p != Path(".")):
                continue
            if config.is_file():
                found.append(str(folder))
            if len(found) >= limit:
                return found
    return found


def dataset_entries(dataset_path: Any) -> list[str]:
    """The entries of the ``dataset_info.json`` that ``dataset_path`` names (the file or its
    folder) whose data file lies beside it."""
    if not isinstance(dataset_path, str) or not dataset_path.strip():
        return []
    path = Path(dataset_path.strip()).expanduser()
    info = path / "dataset_info.json" if path.is_dir() else path
    if info.name != "dataset_info.json" or not info.is_file():
        return []
    try:
        entries = json.loads(read_text(info, _MAX_INFO_BYTES, encoding="utf-8-sig"))
    except (OSError, ValueError):  # unreadable or no JSON: no presets; the run names what is wrong
        return []
    if not isinstance(entries, dict):
        return []
    # only entries whose data file is there: a hub entry cannot run offline, a missing file not at all
    return sorted(str(name) for name, entry in entries.items()
                  if isinstance(entry, dict) and isinstance(entry.get("file_name"), str)
                  and (info.parent / entry["file_name"]).is_file())


def as_text(f: Field, value: Any) -> str:
    """YAML for lists and dicts, ``None`` for None."""
    if value is None:
        return "None"
    if f.kind in ("list", "dict"):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
    return str(value)


def problem_field(problem: str, names: Sequence[str]) -> Optional[str]:
    """The parameter a :class:`ParameterError` line is about, or None (a rule across fields)."""
    match = _PROBLEM_NAME.match(problem)
    return match.group(1) if match and match.group(1) in names else None


@dataclass
class FormField:

    field: Field
    control: Any  # an ipywidgets control
    error: Any  # ipywidgets.HTML under the control
    note: Any = None  # ipywidgets.HTML beside a path ("exists" / "no such folder")
    problem: str = ""  # the one-line error shown in ``error``, as text

    def show_problem(self, problem: str) -> None:
        self.problem = problem
        self.error.value = _error_html(problem) if problem else ""

    def value(self) -> Any:
        """Text read as the command line reads it."""
        return parse_text(self.field, self.control.value)


def _control(f: Field, value: Any, presets: Optional[Sequence[str]] = None):
    """The widget ``f``'s declaration asks for; text offers ``presets``."""
    import ipywidgets as widgets

    common = dict(description=f.name, tooltip=f.spec.doc,
                  style=_LABEL_STYLE)
    spec = f.spec
    if spec.choices:
        options = [(str(c), c) for c in spec.choices] + ([("None", None)] if f.optional else [])
        if not any(value == c and type(value) is type(c) for _, c in options):
            options.append((repr(value), value))  # kept as given, for the check to name it
        return widgets.Dropdown(options=options, value=value, **common)
    typed = _as_read(f, value) if f.kind in ("bool", "int", "float") and not f.optional else None
    if f.kind == "bool" and typed is not None:
        return widgets.Checkbox(value=typed, **common)
    if f.kind in ("int", "float") and typed is not None and spec.min is not None and spec.max is not None:
        # unbounded: a bounded box would clamp 70000 to 65535 silently; the check says the range
        box = widgets.IntText if f.kind == "int" else widgets.FloatText
        return box(value=typed, **common)
    if f.kind in ("list", "dict"):
        return widgets.Textarea(value=as_text(f, value), layout=dict(_WIDE, height="4.5em"), **common)
    placeholder = "None" if f.optional else ""
    if presets is not None:
        return widgets.Combobox(value=as_text(f, value), options=list(presets), ensure_option=False,
                                placeholder=placeholder, layout=_WIDE, **common)
    return widgets.Text(value=as_text(f, value), placeholder=placeholder, layout=_WIDE if f.kind == "str" else {}, **common)


def _as_read(f: Field, value: Any) -> Any:
    """``value`` as the parameter reads it (``"false"`` is False), or None when it is not
    one: then a text keeps it as given, for the check to name it."""
    try:
        return f.convert(value)
    except ParameterError:
        return None


def _path_note(f: Field, text: Any) -> str:
    """Beside a path: whether it names something here (a preset or a hub id is said so)."""
    if not isinstance(text, str) or not text.strip() or text.strip() == "None":
        return ""
    value = text.strip()
    if value.lower() in f.spec.not_paths:
        return "<span style='color:#555'>preset</span>"
    path = Path(value).expanduser()
    if path.exists():
        return "<span style='color:#2e7d32'>exists</span>"
    if f.spec.hub_id and re.fullmatch(r"[\w.-]+/[\w.-]+", value):
        return "<span style='color:#8d6e00'>not here: a hub id? nothing is downloaded</span>"
    if f.spec.written_by:
        return f"<span style='color:#555'>not yet: stage {html.escape(f.spec.written_by)} writes it</span>"
    return "<span style='color:#c62828'>not found</span>"


class StageForm:
    """Built by :func:`stage_form`. "Run stage" checks every field and, when they hold,
    writes them back into ``namespace`` (the notebook's ``globals()``: cells run later see
    what the form ran) and calls ``run`` in a worker thread (:meth:`submit`). The presets
    (:func:`stage_form`) follow the fields they come from as these change."""

    run: Optional[FormRun] = None  # the latest run started from the form

    def __init__(self, params_class: type, namespace: MutableMapping[str, Any], run: RunStage,
                 presets: Optional[Mapping[str, Sequence[str]]] = None, title: str = "",
                 models_folder: str = ""):
        import ipywidgets as widgets

        self.params_class = params_class
        self.namespace = namespace
        self.run_stage = run
        self.fields: dict[str, FormField] = {}
        self.models_folder = None  # the "models folder" box, on a form with a model field
        rows = []
        for f in parameter_fields(params_class):
            control = _control(f, namespace.get(f.name, f.default), (presets or {}).get(f.name))
            error = widgets.HTML(value="", layout={"margin": "0 0 0 14.5em"})
            error.add_class("hyport-error")
            note = widgets.HTML(value=_path_note(f, control.value)) if f.spec.path else None
            row = FormField(f, control, error, note)
            if note is not None:
                control.observe(lambda change, row=row: self._on_path(row, change["new"]), names="value")
            self.fields[f.name] = row
            box = widgets.VBox([widgets.HBox([control] + ([note] if note else [])), error])
            box.add_class(f"hyport-field-{f.name}")  # for a browser to find a field by name
            rows.append(box)
            if is_model_field(f) and self.models_folder is None:
                rows.append(self._models_folder_row(models_folder))
        for entry, source in ENTRY_OF.items():
            if entry in self.fields and source in self.fields:
                self.fields[source].control.observe(
                    lambda change, entry=entry: self._offer(entry, dataset_entries(change["new"])), names="value")
        self.button = widgets.Button(description="Run stage", button_style="primary", icon="play",
                                     tooltip="check the values, then run the stage with them")
        self.status = widgets.HTML(value="")
        self.status.add_class("hyport-status")
        self.output = widgets.Output()
        self.button.on_click(lambda _: self.submit())
        heading = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        self.widget = widgets.VBox(heading + rows + [widgets.HBox([self.button, self.status]),
                                                      self.output])
        self.widget.add_class("hyport-form")

    def _models_folder_row(self, folder: str):
        """A folder given is offered at once."""
        import ipywidgets as widgets

        self.models_folder = widgets.Text(value=folder, description="models folder", style=_LABEL_STYLE,
                                          layout=_WIDE, placeholder="a folder of checkpoints to offer",
                                          tooltip="the checkpoint folders under it join the model presets")
        self.models_note = widgets.HTML()
        self.models_folder.observe(lambda change: self._on_models_folder(change["new"]), names="value")
        self._on_models_folder(folder)
        row = widgets.HBox([self.models_folder, self.models_note])
        row.add_class("hyport-models-folder")
        return row

    def _on_models_folder(self, text: str) -> None:
        folder = Path(text.strip()).expanduser()
        found = model_folders(folder) if text.strip() and folder.is_dir() else []
        for row in self.fields.values():
            if is_model_field(row.field):
                self._offer(row.field.name, list(row.field.spec.presets) + found)
        self.models_note.value = (
            "" if not text.strip() else
            f"<span style='color:#555'>{counted(len(found), 'checkpoint')} offered</span>" if folder.is_dir() else
            "<span style='color:#c62828'>no such folder</span>")

    def _offer(self, name: str, options: Sequence[str]) -> None:
        import ipywidgets as widgets

        control = self.fields[name].control
        if isinstance(control, widgets.Combobox):
            control.options = list(options)

    def _on_path(self, row: FormField, text: Any) -> None:
        row.note.value = _path_note(row.field, text)

    def check(self) -> Optional[StageParams]:
        """The parameters, or None with each problem shown under its field (a problem that
        names no single field, under the button)."""
        for row in self.fields.values():
            row.show_problem("")
        problems: list[str] = []
        values: dict[str, Any] = {}
        for name, row in self.fields.items():
            try:
                values[name] = row.value()
            except ParameterError as exc:
                problems.append(str(exc))
        if not problems:
            try:
                return self.params_class(**values)
            except ParameterError as exc:
                problems = exc.details or [str(exc)]
        self._show_problems(problems)
        return None

    def _show_problems(self, problems: Sequence[str]) -> None:
        """Each under the field it names; one that names none, under the button."""
        general = []
        for problem in problems:
            name = problem_field(problem, list(self.fields))
            if name:
                self.fields[name].show_problem(problem)
            else:
                general.append(problem)
        self.status.value = _error_html("; ".join(general) if general else
                                        f"{counted(len(problems), 'value')} to fix above")

    def _refused(self, exc: BaseException) -> None:
        """A value the stage refused (in its plan, mostly), as the command line says it: one
        line, under the field it names; its details (every bad record) listed below."""
        several = isinstance(exc, ParameterError) and exc.details
        # scrubbed as the command line's line is: a message may quote a token's value
        self._show_problems([scrub_text(str(d)) for d in exc.details] if several else [scrub_text(one_line(exc))])
        if not several:
            for line in getattr(exc, "details", None) or ():
                print(f"  {scrub_text(str(line))}")

    def submit(self) -> Optional[FormRun]:
        """What "Run stage" does: the values checked, then the stage started in a worker thread
        (:class:`FormRun`), returned at once: the kernel keeps serving the page meanwhile. None
        when a value is wrong, or while a run of this form works (one at a time)."""
        if self.run is not None and self.run.running:
            self.status.value = _error_html("a run of this form is under way: one at a time")
            return None
        params = self.check()
        if params is None:
            return None
        self.namespace.update(params.to_dict())
        self.button.disabled = True
        self.output.outputs = ()
        run_stage = self.run_stage
        stoppable = isinstance(run_stage, StageRunner) and run_stage.stoppable
        self.status.value = html.escape(running_line(run_stage))
        work = (lambda watch: run_stage(params, watch=watch)) if stoppable else (lambda watch: run_stage(params))
        self.run = FormRun(self.output, work, self._ended, stoppable=stoppable).start()
        return self.run

    def _ended(self, run: FormRun) -> None:
        """In the worker, its output still routed: the status says how the run ended; a
        defect's traceback is in the output."""
        try:
            error = run.error
            if error is None:
                summary = run.result
                self.status.value = verdict_label(summary.verdict,
                                                  f"{summary.verdict}: {shortened(summary.summary, 200)}")
            elif isinstance(error, USAGE_ERRORS):  # what the command line says in one line, exit 2
                self._refused(error)
            else:
                self.status.value = _error_html(scrub_text(f"stopped: {type(error).__name__}: {first_line(error)}"))
                run.route.error(error)
        finally:
            self.button.disabled = False


def running_line(run_stage: Any) -> str:
    """The status while a form run works: how it can be ended, as far as that is true."""
    if not (isinstance(run_stage, StageRunner) and run_stage.stoppable):
        return "running… (this stage has no Stop: it ends by itself)"
    kept = "what finished is kept" if run_stage.keeps_partial else "this stage keeps nothing when stopped"
    return f"running… (■ Stop or Kernel → Interrupt ends it; {kept})"


def _error_html(text: str) -> str:
    return f"<span style='color:#c62828'>{html.escape(text)}</span>"


def is_model_field(f: Field) -> bool:
    """Whether ``f`` names a model folder (or, as a folder that is not here, a hub id)."""
    return f.spec.path == "dir" and f.spec.hub_id


def stage_form(params_class: type, namespace: MutableMapping[str, Any], run: RunStage, *,
               models_folder: str = "", title: str = "") -> StageForm:
    """Presets as each field declares them (what hyport ships), the checkpoints under
    ``models_folder`` (a box of the form) for model folders, and a ``dataset_info.json``'s entries."""
    fields = parameter_fields(params_class)
    presets = {f.name: list(f.spec.presets) for f in fields if f.spec.presets}
    for entry, source in ENTRY_OF.items():
        if {entry, source} <= {f.name for f in fields}:
            presets[entry] = dataset_entries(namespace.get(source, ""))
    return StageForm(params_class, namespace, run, presets=presets, title=title, models_folder=models_folder)


class ViewFailed(Exception):
    """A view failed on a result the stage recorded: a defect, shown with its traceback;
    never said as a refused value (it is not one of the usage errors)."""


class StageRunner:
    """What "Run stage" does for a stage (made by :func:`stage_runner`): plan, run (with a
    fresh ``progress(params)`` display when given), record, show through each of ``views``
    and print the verdict line the notebook's last cell prints. Stopped, the partial result
    is recorded; a stage that keeps none (``keeps_partial`` False) is said INTERRUPTED with
    nothing recorded. A stage with a progress display is stoppable: its progress calls are
    where a form run's stop is taken (``watch``, :meth:`FormRun.watch`)."""

    def __init__(self, stage: StageContract, views: Sequence[Callable[[Any], Any]],
                 progress: Optional[Callable[[StageParams], Any]], keeps_partial: bool):
        self.stage = stage
        self.views = views
        self.progress = progress
        self.keeps_partial = keeps_partial

    @property
    def stoppable(self) -> bool:
        return self.progress is not None

    def __call__(self, params: StageParams,
                 watch: Optional[Callable[[Any], Callable[[Any], None]]] = None) -> StageSummary:
        stage = self.stage
        plan = stage.plan(params)
        on_progress = None
        if self.progress is not None:
            display = self.progress(params)
            on_progress = watch(display) if watch is not None else display
        try:
            result = run_stoppable(stage.run, plan, on_progress=on_progress)
        except KeyboardInterrupt:
            if watch is None:
                raise
            number = stage.STAGE.split("_")[0]
            why = (f"stage {number} keeps no partial result" if not self.keeps_partial
                   else "stopped before anything finished")
            summary = StageSummary(verdict=INTERRUPTED, summary=f"nothing kept: {why}")
            print(f"{summary.verdict}: {summary.summary} (nothing recorded)")
            return summary
        # Recorded before it is shown: a view that fails loses nothing.
        path = record(stage, result, params=params)
        summary = stage.summarize(result)
        try:
            for view in self.views:
                view(result)
        except USAGE_ERRORS as exc:  # a defect of the display, not a value to refuse
            raise ViewFailed(f"showing the result failed ({type(exc).__name__}); it is recorded: {path}") from exc
        print(f"{summary.verdict}: {summary.summary} -> {path}")
        return summary


def stage_runner(stage: StageContract, *views: Callable[[Any], Any],
                 progress: Optional[Callable[[StageParams], Any]] = None,
                 keeps_partial: bool = True) -> StageRunner:
    """What "Run stage" does for ``stage`` (:class:`StageRunner`)."""
    return StageRunner(stage, views, progress, keeps_partial)


def show_stage_form(params_class: type, namespace: MutableMapping[str, Any], run: RunStage,
                    **options: Any) -> Optional[StageForm]:
    """Under ``hyport report`` (headless, its run folder set): nothing, None."""
    if os.environ.get(RUN_DIR_ENV):
        return None
    from IPython.display import display

    form = stage_form(params_class, namespace, run, **options)
    display(form.widget)
    return form
