"""One row of the workbook form per parameter, made from its declaration: a label of our
own (the full name, its doc as the page's tooltip), the control its kind asks for and a
line under it for its error.

- a ``choices`` field: a dropdown; a bool: a checkbox; a list or dict: YAML in a text area;
- an int or a float: a number box that keeps what is typed, read as the command line
  reads it (neither clamped nor rewritten: the check says what is wrong), with a "None"
  checkbox beside it when None is accepted;
- a text with presets (what hyport ships, checkpoints found, a dataset_info.json's
  entries): a combo box; other text: a text box ("None" typed is None, as on the command
  line).

A value no control of its kind can hold (``"maybe"`` for a bool) gets a text box, kept as
given for the check to name. Text is read as the command line reads it
(:func:`hyport_lib.params.parse_text`).
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml

from hyport_lib.params import Field, ParameterError, parse_text

#: The labels' column: the longest name (``per_device_train_batch_size``) wraps once, at
#: an underscore, never cut.
LABEL_WIDTH = "15em"
_TEXT_WIDTH = "36em"
_NUMBER_WIDTH = "12em"
#: The class of a number box, and the look it gets from :func:`form_style`.
NUMBER_CLASS = "hyport-number"
#: Typed values reach the kernel (and the live check) on Enter or when the box is left,
#: not on every key.
_ON_BLUR = {"continuous_update": False}


def error_html(text: str) -> str:
    """A one-line error in red, shown as text (never as markup)."""
    return f"<span style='color:#c62828'>{html.escape(text)}</span>"


def form_style():
    """The form's own CSS, in a hidden HTML widget (a ``<style>`` applies though hidden):
    a number box reads as one, its digits right-aligned and in columns."""
    import ipywidgets as widgets

    css = f".{NUMBER_CLASS} input {{ text-align: right; font-variant-numeric: tabular-nums; }}"
    return widgets.HTML(value=f"<style>{css}</style>", layout={"display": "none"})


def as_text(f: Field, value: Any) -> str:
    """YAML for lists and dicts (a text given for one is shown as it is: it is read as
    YAML), ``None`` for None."""
    if value is None:
        return "None"
    if f.kind in ("list", "dict") and not isinstance(value, str):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
    return str(value)


def is_model_field(f: Field) -> bool:
    """Whether ``f`` names a model folder (or, as a folder that is not here, a hub id)."""
    return f.spec.path == "dir" and f.spec.hub_id


def path_note(f: Field, text: Any) -> str:
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
    if f.spec.output:  # the stage's own output folder: made by the run, not missing
        return "<span style='color:#555'>new: the run makes it</span>"
    return "<span style='color:#c62828'>not found</span>"


def label_html(f: Field) -> str:
    """The field's full name, breakable after each underscore, its doc as the ``title``."""
    name = "_<wbr>".join(html.escape(part) for part in f.name.split("_"))
    return (f"<span class='hyport-label-text' title='{html.escape(f.spec.doc, quote=True)}' "
            f"style='display:inline-block; line-height:1.25; overflow-wrap:normal'>{name}</span>")


@dataclass
class FormField:
    """One parameter's row: ``widget`` (classed ``hyport-field-<name>``) holds ``label``,
    ``control``, ``none`` (the "None" box of an optional number), ``note`` (beside a path)
    and ``error`` under them."""

    field: Field
    control: Any
    label: Any
    error: Any
    widget: Any
    note: Any = None
    none: Any = None
    problem: str = ""  # the one-line error shown in ``error``, as text

    def show_problem(self, problem: str) -> None:
        self.problem = problem
        self.error.value = error_html(problem) if problem else ""

    def value(self) -> Any:
        """What the row says, read as the command line reads it (a ParameterError when its
        text is no YAML)."""
        if self.none is not None and self.none.value:
            return None
        held = self.control.value
        return parse_text(self.field, number_text(held) if isinstance(held, float) else held)

    def typed(self) -> Any:
        """:meth:`value`, or the text itself where it cannot be read: what a person typed."""
        try:
            return self.value()
        except ParameterError:
            return self.control.value

    def on_change(self, callback: Callable[[], Any]) -> None:
        """``callback()`` after each change of the value (the control or its "None" box)."""
        self.control.observe(lambda _: callback(), names="value")
        if self.none is not None:
            self.none.observe(lambda _: callback(), names="value")


def field_row(f: Field, value: Any, presets: Optional[Sequence[str]] = None,
              choices: Optional[Sequence[Any]] = None) -> FormField:
    """The row of ``f`` showing ``value``; a text offers ``presets``. ``choices`` (known only
    when the form is built: what this backend can run) make it a dropdown of them, as a
    declared ``choices`` does; the check still decides what is accepted."""
    import ipywidgets as widgets

    control, none = _control(f, value, presets, tuple(choices) if choices is not None else f.spec.choices)
    label = widgets.HTML(value=label_html(f), layout={"width": LABEL_WIDTH, "flex": f"0 0 {LABEL_WIDTH}"})
    label.add_class("hyport-label")
    error = widgets.HTML(value="", layout={"margin": f"0 0 0 {LABEL_WIDTH}"})
    error.add_class("hyport-error")
    note = widgets.HTML(value=path_note(f, control.value)) if f.spec.path else None
    if note is not None:
        control.observe(lambda change: setattr(note, "value", path_note(f, change["new"])), names="value")
    line = widgets.HBox([label, control] + ([none] if none is not None else []) + ([note] if note else []),
                        layout={"align_items": "center"})
    widget = widgets.VBox([line, error])
    widget.add_class(f"hyport-field-{f.name}")  # for a browser (and part of the tests) to find a field
    return FormField(f, control, label, error, widget, note, none)


def dropdown_options(f: Field, choices: Sequence[Any], value: Any) -> tuple[list[tuple[str, Any]], Any]:
    """A dropdown's (label, value) options for ``choices`` and the value it shows for ``value``.
    None is offered as the text "None" (read as None, as on the command line): a None value is
    no choice at all to ipywidgets, and the dropdown would show blank. A value not offered is
    kept as given, last, for the check to name it."""
    options = [(str(c), c) for c in choices if c is not None]
    options += [("None", "None")] if f.optional or None in choices else []
    shown = "None" if value is None else value
    if not any(shown == c and type(shown) is type(c) for _, c in options):
        options.append((repr(shown), shown))
    return options, shown


def _control(f: Field, value: Any, presets: Optional[Sequence[str]], choices: tuple) -> tuple[Any, Any]:
    """The control ``f``'s declaration asks for, and the "None" box beside an optional number."""
    import ipywidgets as widgets

    # description stays empty: the label is ours, and only then does ipywidgets put the
    # tooltip on the input itself as its ``title``
    common = dict(tooltip=f.spec.doc)
    if choices:
        options, shown = dropdown_options(f, choices, value)
        return widgets.Dropdown(options=options, value=shown, layout={"width": "auto"}, **common), None
    if f.kind == "bool" and not f.optional:
        flag = _as_read(f, value)
        if flag is not None:
            return widgets.Checkbox(value=flag, indent=False, layout={"width": "auto"}, **common), None
    if f.kind in ("int", "float"):
        return _number_box(f, value, common)
    if f.kind in ("list", "dict"):
        return widgets.Textarea(value=as_text(f, value), layout={"width": _TEXT_WIDTH, "height": "4.5em"},
                                **_ON_BLUR, **common), None
    placeholder = "None" if f.optional else ""
    width = {"width": _TEXT_WIDTH if f.kind == "str" else _NUMBER_WIDTH}
    if presets is not None:
        return widgets.Combobox(value=as_text(f, value), options=list(presets), ensure_option=False,
                                placeholder=placeholder, layout=width, **_ON_BLUR, **common), None
    return widgets.Text(value=as_text(f, value), placeholder=placeholder, layout=width, **_ON_BLUR, **common), None


def _number_box(f: Field, value: Any, common: dict) -> tuple[Any, Any]:
    """A number box (``<input type=number>``: ipywidgets' FloatText, which keeps ``1e3`` and
    ``2.5`` as typed, where IntText drops the keys ``e`` and ``.``) showing ``value``; for an
    optional number a "None" box beside it, ticked when the value is None (the number box is
    then greyed), a number typed unticks it. What it holds is handed over as the command
    line's text (:func:`number_text`), so the check reads and names it as ``--flag`` would. A
    value that is no number, or an integer past 2**53 (a browser's number would round it), is
    shown in a text box as given, for the check to name it or to keep it exact."""
    import ipywidgets as widgets

    number = _as_number(f, value)
    if value is not None and number is None:
        box = widgets.Text(value=as_text(f, value), layout={"width": _NUMBER_WIDTH}, **_ON_BLUR, **common)
    else:
        shown = _placeholder_number(f) if number is None else number
        box = widgets.FloatText(value=shown, layout={"width": _NUMBER_WIDTH}, **_ON_BLUR, **common)
    box.add_class(NUMBER_CLASS)
    if not f.optional:
        return box, None
    none = widgets.Checkbox(value=value is None, description="None", indent=False, layout={"width": "auto"})
    none.add_class("hyport-none")
    box.disabled = value is None

    def on_none(change: dict) -> None:
        box.disabled = change["new"]

    none.observe(on_none, names="value")
    box.observe(lambda _: setattr(none, "value", False), names="value")
    return box, none


#: The largest integer a browser's number (a double) holds exactly.
_EXACT_IN_A_BROWSER = 2**53


def _as_number(f: Field, value: Any) -> Optional[float]:
    """``value`` as a number box holds it, or None: not a finite number (a text the check will
    name), or an integer a browser would round. A number the check refuses (out of range) is
    held as it is, for the check to name it."""
    read = _as_read(f, value) if value is not None else None
    number = value if read is None else read
    if not isinstance(number, (int, float)) or isinstance(number, bool) or not math.isfinite(number):
        return None
    if isinstance(number, int) and abs(number) > _EXACT_IN_A_BROWSER:
        return None
    return float(number)


def number_text(number: float) -> str:
    """A number box's value as the command line's text: ``0`` (not ``0.0``) for a whole number,
    so that the check reads and names it as ``--flag 0`` is."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def _placeholder_number(f: Field) -> float:
    """What an optional number's box shows while None is ticked: the lowest value it takes."""
    spec = f.spec
    return float(spec.min if spec.min is not None else
                 spec.min_exclusive + 1 if spec.min_exclusive is not None else 0)


def _as_read(f: Field, value: Any) -> Any:
    """``value`` as the parameter reads it (``"false"`` is False), or None when it is not
    one: then a text keeps it as given, for the check to name it."""
    try:
        return f.convert(value)
    except ParameterError:
        return None
