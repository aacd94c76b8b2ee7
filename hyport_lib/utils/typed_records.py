"""Typed records written field by field and read back without trusting their shape (an
older or half-written file): one class is both the writer's and the reader's.

:func:`to_mapping` writes a dataclass as :func:`dataclasses.asdict` does, except that a
nested class with its own ``to_dict`` is written through it. :func:`from_mapping` builds a
dataclass field by field: a missing key, or a value of another type, gives the field's
default (or an empty value of its type), and a list or a dict keeps only the items of its
type; a shape problem never raises. Numbers stay as recorded (an ``int`` in a ``float``
field stays an ``int``: the drafts write ``3``, not ``3.0``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, TypeVar, Union

T = TypeVar("T")
#: A value that does not fit its field (the field takes its default).
_WRONG = object()


def to_mapping(value: Any) -> Any:
    """``value`` as JSON-ready data (see the module docstring); tuples become lists, paths
    text."""
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_dict", None)
        return own() if own is not None else fields_of(value)
    if isinstance(value, (list, tuple)):
        return [to_mapping(v) for v in value]
    if isinstance(value, dict):
        return {k: to_mapping(v) for k, v in value.items()}
    return value


def fields_of(value: Any) -> dict:
    """The dataclass ``value``'s fields, each through :func:`to_mapping` (what a ``to_dict``
    that adds derived keys starts from)."""
    return {f.name: to_mapping(getattr(value, f.name)) for f in dataclasses.fields(value)}


def from_mapping(cls: type[T], data: Any) -> T:
    """An instance of the dataclass ``cls`` from ``data`` (see the module docstring)."""
    return cls(**field_values(cls, data))


def field_values(cls: type, data: Any) -> dict[str, Any]:
    """What :func:`from_mapping` passes to ``cls``: each of its fields read from ``data``."""
    data = data if isinstance(data, Mapping) else {}
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        value = _read(hints[f.name], data[f.name]) if f.name in data else _WRONG
        values[f.name] = _default(f, hints[f.name]) if value is _WRONG else value
    return values


def require_fields(cls: type, data: Any, what: str) -> None:
    """A one-line ValueError naming ``what`` when ``data`` is no mapping or misses a field of
    ``cls`` that has no default, checked down through the dataclasses (and lists of them) its
    fields hold: for data another process wrote, where a half-written result must be refused
    rather than read as defaults."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{what}: expected a dict, got {type(data).__name__}")
    missing = sorted(f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING and f.name not in data)
    if missing:
        raise ValueError(f"{what}: missing field(s) {', '.join(missing)}")
    for name, kind in typing.get_type_hints(cls).items():
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        item = args[0] if (origin is list and args) else None
        if item is None or not dataclasses.is_dataclass(item) or name not in data:
            continue
        if not isinstance(data[name], list):
            raise ValueError(f"{what} {name}: expected a list, got {type(data[name]).__name__}")
        for value in data[name]:
            require_fields(item, value, f"{what} {name}")


def _read(kind: Any, value: Any) -> Any:
    if kind is Any or isinstance(kind, TypeVar):
        return value
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        if value is None:
            return None if type(None) in args else _WRONG
        for option in (a for a in args if a is not type(None)):
            read = _read(option, value)
            if read is not _WRONG:
                return read
        return _WRONG
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, Mapping):
            return _WRONG
        try:
            return getattr(kind, "from_dict", lambda d: from_mapping(kind, d))(value)
        except (TypeError, ValueError):  # a record the class's own checks refuse
            return _WRONG
    if origin is list or kind is list:
        if not isinstance(value, list):
            return _WRONG
        item = args[0] if args else Any
        return [r for r in (_read(item, v) for v in value) if r is not _WRONG]
    if origin is dict or kind is dict:
        if not isinstance(value, dict):
            return _WRONG
        item = args[1] if len(args) == 2 else Any
        return {k: r for k, r in ((k, _read(item, v)) for k, v in value.items()) if r is not _WRONG}
    if kind is float:
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else _WRONG
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _WRONG
    if isinstance(kind, type) and issubclass(kind, PurePath):
        return kind(value) if isinstance(value, (str, PurePath)) else _WRONG
    if isinstance(kind, type):
        return value if isinstance(value, kind) else _WRONG
    return value


def _default(f: dataclasses.Field, kind: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType) and type(None) in args:
        return None
    if dataclasses.is_dataclass(kind):
        return from_mapping(kind, {})
    empty = {list: list, dict: dict, str: str, int: int, float: float, bool: bool}
    maker = empty.get(origin or kind)
    return maker() if maker else None
