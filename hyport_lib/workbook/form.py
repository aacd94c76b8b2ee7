"""A form per stage, made from its ``Params`` class: the workbook's interactive front door.

The few fields that matter come first; the rest are in folded sections (each field's
``group``, as ``--help`` and docs/parameters.md group them). Each field's row
(:mod:`hyport_lib.workbook.controls`) has its full name, its doc as the tooltip, the
control its declaration asks for and a line under it for its error. Values go through
:func:`hyport_lib.params.parse_text` and the class itself, the one path the command line
and the report use, so a bad value gets the same one-line error here, as soon as it is
typed and again on Run, and so does a value the stage's plan refuses. The form starts from
the notebook's namespace (the ``parameters`` cell stays the papermill source) and keeps what
was typed into it across a Run All in the same kernel; headless runs never build it.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping, Optional, Sequence

from hyport_lib.display import verdict_label
from hyport_lib.params import GROUPS, Field, ParameterError, StageParams, grouped_fields, parameter_fields
from hyport_lib.results import INTERRUPTED, RUN_DIR_ENV, StageSummary, record
from hyport_lib.stages import StageContract
from hyport_lib.utils.bounded_files import read_text
from hyport_lib.utils.printable import USAGE_ERRORS, first_line, one_line, shortened
from hyport_lib.utils.redact import scrub_text
from hyport_lib.workbook.controls import (LABEL_WIDTH, FormField, dropdown_options, error_html, field_row,
                                          form_style, is_model_field)
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

#: A problem's parameter: the text before ``=`` or ``:`` that opens it, an item's index
#: aside (``max_steps=-3: expected ...``, ``dataset: no such entry``, ``batch_prompts[0]=...``).
_PROBLEM_NAME = re.compile(r"^\s*([A-Za-z_]\w*)(?:\[[^\]]*\])?\s*[=:]")

#: What was typed into each stage's form in this kernel, by ``Params`` class and field: a
#: Run All runs the ``parameters`` cell again, and the form built next keeps these values.
#: A fresh kernel (and a headless run, which builds no form) starts with none.
TYPED_VALUES: dict[type, dict[str, Any]] = {}


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


def problem_field(problem: str, names: Sequence[str]) -> Optional[str]:
    """The parameter a :class:`ParameterError` line is about, or None (a rule across fields)."""
    match = _PROBLEM_NAME.match(problem)
    return match.group(1) if match and match.group(1) in names else None


def _same_value(f: Field, typed: Any, given: Any) -> bool:
    """Whether ``typed`` and ``given`` mean the same for ``f``, as the parameter reads them:
    a form run writes the values it ran back into the namespace read (``~`` expanded, ``7``
    for a float 7.0), and such a value is no change of the ``parameters`` cell. A value
    either cannot read is compared as it is; ``1`` is never ``True``."""
    try:
        a, b = f.convert(typed), f.convert(given)
    except ParameterError:  # compared as given: the check names what cannot be read
        a, b = typed, given
    return a == b and isinstance(a, bool) == isinstance(b, bool)


class StageForm:
    """Built by :func:`stage_form`. "Run stage" checks every field and, when they hold,
    writes them back into ``namespace`` (the notebook's ``globals()``: cells run later see
    what the form ran) and calls ``run`` in a worker thread (:meth:`submit`). Each change is
    checked at once, as Run checks it, and remembered (:data:`TYPED_VALUES`): a form built
    again (Run All) keeps what was typed, writes it into ``namespace`` and says so, with a
    Reset back to the ``parameters`` cell.
    The presets (:func:`stage_form`) follow the fields they come from as these change."""

    run: Optional[FormRun] = None  # the latest run started from the form

    def __init__(self, params_class: type, namespace: MutableMapping[str, Any], run: RunStage,
                 presets: Optional[Mapping[str, Sequence[str]]] = None, title: str = "",
                 models_folder: str = ""):
        import ipywidgets as widgets

        self.params_class = params_class
        self.namespace = namespace
        self.run_stage = run
        self.presets = dict(presets or {})
        self.fields: dict[str, FormField] = {}
        self.models_folder = None  # the "models folder" box, on a form with a model field
        self._models_folder_text = models_folder
        self._problems_status = None  # what the last check wrote into the status
        self._offering = False  # True while options are offered anew: a value changed then is no one's typing
        self._sections: dict[str, Any] = {}  # the folded section of each field in one
        fields = {f.name: f for f in parameter_fields(params_class)}
        # what the parameters cell (the namespace) gave, every field: what Reset goes back to
        self.cell = {name: namespace.get(name, f.default) for name, f in fields.items()}
        cell = self.cell
        typed = TYPED_VALUES.get(params_class, {})
        kept = {name: value for name, value in typed.items()
                if name in cell and not _same_value(fields[name], value, cell[name])}
        self.cell_values = {name: cell[name] for name in kept}  # what the parameters cell says of them
        namespace.update(kept)  # the cells below run with what the form shows

        self.button = widgets.Button(description="Run stage", button_style="primary", icon="play",
                                     tooltip="check the values, then run the stage with them")
        self.status = widgets.HTML(value="")
        self.status.add_class("hyport-status")
        self.output = widgets.Output()
        self.button.on_click(lambda _: self.submit())
        self.kept = widgets.HTML()
        self.reset_button = widgets.Button(description="Reset", icon="undo",
                                           tooltip="back to the values of the parameters cell")
        self.reset_button.on_click(lambda _: self.reset())
        self.kept_line = widgets.HBox([self.kept, self.reset_button])
        self.kept_line.add_class("hyport-kept")
        self.body = widgets.VBox(self._build({**cell, **kept}))
        self._say_kept()
        heading = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        self.widget = widgets.VBox(heading + [form_style(), self.kept_line, self.body,
                                              widgets.HBox([self.button, self.status]), self.output])
        self.widget.add_class("hyport-form")
        if kept:
            self.check()  # a kept value the parameters cell now makes wrong is said at once

    def _build(self, values: Mapping[str, Any]) -> list:
        """The rows showing ``values``: the main section, then one folded section per group."""
        import ipywidgets as widgets

        self.fields = {}
        self._sections = {}
        parts = []
        models_row = False  # the "models folder" row, once, under the first model field
        for group, fields in grouped_fields(self.params_class):
            rows = []
            for f in fields:
                offered = f.spec.offered(values) if f.spec.offered is not None else None
                row = field_row(f, values[f.name], self.presets.get(f.name), offered)
                self.fields[f.name] = row
                row.on_change(lambda name=f.name: self._on_change(name))
                rows.append(row.widget)
                if is_model_field(f) and not models_row:
                    rows.append(self._models_folder_row(self._models_folder_text))
                    models_row = True
            if not group:
                parts.extend(rows)
                continue
            section = widgets.Accordion(children=[widgets.VBox(rows)], titles=(group,), selected_index=None)
            section.add_class(f"hyport-section-{GROUPS.index(group)}")
            section.add_class("hyport-section")
            self._sections.update({f.name: section for f in fields})
            parts.append(section)
        for entry, source in ENTRY_OF.items():
            if entry in self.fields and source in self.fields:
                self.fields[source].control.observe(
                    lambda change, entry=entry: self._offer(entry, dataset_entries(change["new"])), names="value")
                self._offer(entry, dataset_entries(self.fields[source].typed()))
        if self.models_folder is not None:
            self._on_models_folder(self.models_folder.value)
        return parts

    def _on_change(self, name: str) -> None:
        """Remember what was typed; offer again what follows the values (what ``device`` can
        run); check the values as Run would (the errors under their fields). A value changed
        by the offer itself is none of these: the change typed is checked once offered."""
        if self._offering:
            return
        TYPED_VALUES.setdefault(self.params_class, {})[name] = self.fields[name].typed()
        self._offer_again(name)
        if self.check() is not None and self.status.value == self._problems_status:
            self.status.value = ""  # the problems said there are fixed

    def _offer_again(self, changed: str) -> None:
        """The dropdowns whose options depend on the values (:attr:`Spec.offered`), another
        field having changed: same value kept (said as not offered when it no longer is)."""
        import ipywidgets as widgets

        values = {name: row.typed() for name, row in self.fields.items()}
        for name, row in self.fields.items():
            if name == changed or row.field.spec.offered is None or not isinstance(row.control, widgets.Dropdown):
                continue
            options, shown = dropdown_options(row.field, row.field.spec.offered(values), row.control.value)
            if list(row.control.options) != options:
                self._offering = True
                try:
                    row.control.options = options  # ipywidgets picks the first option here
                    row.control.value = shown
                finally:
                    self._offering = False

    def _say_kept(self) -> None:
        cell = self.cell_values
        said = ", ".join(f"{name}={value!r}" for name, value in cell.items())
        self.kept.value = (f"{counted(len(cell), 'value')} kept from the form (the parameters cell says "
                           f"{html.escape(said)})" if cell else "")
        self.kept_line.layout.display = "flex" if cell else "none"

    def reset(self) -> None:
        """Back to the values the ``parameters`` cell gave when the form was built, every
        field, here and in the namespace; nothing typed is kept."""
        TYPED_VALUES.pop(self.params_class, None)
        self.namespace.update({name: value for name, value in self.cell.items() if name in self.namespace})
        self.cell_values = {}
        self.body.children = self._build(self.cell)
        self._say_kept()
        self.status.value = ""

    def _models_folder_row(self, folder: str):
        """A folder given is offered at once."""
        import ipywidgets as widgets

        if self.models_folder is None:
            self.models_folder = widgets.Text(value=folder, placeholder="a folder of checkpoints to offer",
                                              tooltip="the checkpoint folders under it join the model presets",
                                              continuous_update=False, layout={"width": "36em"})
            self.models_note = widgets.HTML()
            self.models_folder.observe(lambda change: self._on_models_folder(change["new"]), names="value")
            label = widgets.HTML("<span title='the checkpoint folders under it join the model presets'>"
                                 "models folder</span>", layout={"width": LABEL_WIDTH, "flex": f"0 0 {LABEL_WIDTH}"})
            self._models_row = widgets.HBox([label, self.models_folder, self.models_note])
            self._models_row.add_class("hyport-models-folder")
        return self._models_row

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

    def check(self) -> Optional[StageParams]:
        """The parameters, or None with each problem shown under its field (a problem that
        names no single field, under the button). A line that stays is not cleared first: a
        check on each change, then Run's, would make it blink (and a browser read it blank)."""
        problems: list[str] = []
        values: dict[str, Any] = {}
        for name, row in self.fields.items():
            try:
                values[name] = row.value()
            except ParameterError as exc:
                problems.append(str(exc))
        if not problems:
            try:
                params = self.params_class(**values)
            except ParameterError as exc:
                problems = exc.details or [str(exc)]
            else:
                self._show_problems([])
                return params
        self._show_problems(problems)
        return None

    def _show_problems(self, problems: Sequence[str]) -> None:
        """Each under the field it names (every other field's line emptied); one that names
        none, under the button."""
        general, by_field = [], {}
        for problem in problems:
            name = problem_field(problem, list(self.fields))
            if name:
                by_field[name] = problem
            else:
                general.append(problem)
        for name, row in self.fields.items():
            row.show_problem(by_field.get(name, ""))
        for name in by_field:  # a line under a folded field is seen: its section opens
            section = self._sections.get(name)
            if section is not None and section.selected_index is None:
                section.selected_index = 0
        if not problems:
            return
        self.status.value = self._problems_status = error_html(
            "; ".join(general) if general else f"{counted(len(problems), 'value')} to fix above")

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
            self.status.value = error_html("a run of this form is under way: one at a time")
            return None
        params = self.check()
        if params is None:
            return None
        self.namespace.update(params.to_dict())
        self.button.disabled = True
        if self.run is not None:  # its widgets go with its output
            self.run.close()
        self.output.outputs = ()
        run_stage = self.run_stage
        stoppable = isinstance(run_stage, StageRunner) and run_stage.stoppable
        self.status.value = html.escape(running_line(run_stage))
        work = (lambda run: run_stage(params, form_run=run)) if stoppable else (lambda run: run_stage(params))
        self.run = FormRun(self.output, work, self._ended, stoppable=stoppable).start()
        return self.run

    def _ended(self, run: FormRun) -> None:
        """In the worker, its output still routed: the status says how the run ended; a
        defect's traceback is in the output."""
        try:
            error = run.error
            if error is None:
                summary = run.result
                late = "" if run.stopped or not run.stopping.is_set() else \
                    f" ({run.stopped_by} came after the stage's last step: it finished)"
                self.status.value = verdict_label(summary.verdict,
                                                  f"{summary.verdict}: {shortened(summary.summary, 200)}{late}")
            elif isinstance(error, USAGE_ERRORS):  # what the command line says in one line, exit 2
                self._refused(error)
            else:
                self.status.value = error_html(scrub_text(f"stopped: {type(error).__name__}: {first_line(error)}"))
                run.route.error(error)
        finally:
            self.button.disabled = False


def running_line(run_stage: Any) -> str:
    """The status while a form run works: how it can be ended, as far as that is true."""
    if not (isinstance(run_stage, StageRunner) and run_stage.stoppable):
        return "running… (this stage has no Stop: it ends by itself)"
    kept = "what finished is kept" if run_stage.keeps_partial else "this stage keeps nothing when stopped"
    return f"running… (■ Stop or Kernel → Interrupt ends it; {kept})"


def stage_form(params_class: type, namespace: MutableMapping[str, Any], run: RunStage, *,
               models_folder: str = "", title: str = "") -> StageForm:
    """Presets as each field declares them (what hyport ships), the checkpoints under
    ``models_folder`` (a box of the form) for model folders, and a ``dataset_info.json``'s entries;
    a field with :attr:`~hyport_lib.params.Spec.offered` a dropdown of what it offers (what this
    backend can run), following the values it is given as they change."""
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
    where a form run's stop is taken (:meth:`FormRun.watch`), or anywhere in its run once it
    reached none for a few seconds (:meth:`FormRun.interruptible`)."""

    def __init__(self, stage: StageContract, views: Sequence[Callable[[Any], Any]],
                 progress: Optional[Callable[[StageParams], Any]], keeps_partial: bool):
        self.stage = stage
        self.views = views
        self.progress = progress
        self.keeps_partial = keeps_partial

    @property
    def stoppable(self) -> bool:
        return self.progress is not None

    def __call__(self, params: StageParams, form_run: Optional[FormRun] = None) -> StageSummary:
        stage = self.stage
        plan = stage.plan(params)
        on_progress = None
        if self.progress is not None:
            display = self.progress(params)
            on_progress = form_run.watch(display) if form_run is not None else display
        try:
            with form_run.interruptible() if form_run is not None else contextlib.nullcontext():
                result = run_stoppable(stage.run, plan, on_progress=on_progress)
        except KeyboardInterrupt:
            if form_run is None:
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
