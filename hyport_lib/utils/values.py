"""Parameter values parsed strictly from what papermill, YAML and the command line give
(``"16"``, ``"false"``), with errors that name the parameter.
"""

from __future__ import annotations

import math
import numbers

_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def as_int(name: str, value) -> int:
    """An integer from an int, an integral float or an int-like string; otherwise a
    ValueError naming ``name``. Bools are refused (``True`` is no token count)."""
    number = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)  # "16.0" or "1e3"
            except ValueError:
                raise ValueError(f"{name}={value!r}: expected an integer") from None
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise ValueError(f"{name}={value!r}: expected an integer")
    if isinstance(number, numbers.Integral):
        return int(number)
    if not math.isfinite(number) or not float(number).is_integer():
        raise ValueError(f"{name}={value!r}: expected an integer, not a fraction")
    return int(number)


def as_float(name: str, value) -> float:
    """A finite float from a number or a numeric string; otherwise a ValueError
    naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f"{name}={value!r}: expected a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}={value!r}: expected a finite number")
    return number


def as_flag(name: str, value) -> bool:
    """A bool from a bool, 0/1 or true/false/yes/no (any case); otherwise a
    ValueError naming ``name`` (``bool("false")`` would be True)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(int(value))
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError(f"{name}={value!r}: expected true/false (or yes/no, 1/0)")


def from_known_keys(cls, data):
    """``cls(**data)`` for a dataclass, refusing keys it does not have: a misspelt key in a
    saved config is an error naming it, never silently dropped."""
    from dataclasses import fields

    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**dict(data))
