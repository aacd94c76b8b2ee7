"""Rules for parameter names, and the names that changed.

**The rule.** A parameter shared by several stages has a plain name: ``device``,
``num_cards``, ``model_path``, ``dtype``, ``attn_implementation``,
``trust_remote_code``. A parameter of one stage is plain too, unless the same word
would mean something else in another stage; then it carries the stage's prefix
(``timeout_s`` meant only the inference limit, so it is ``infer_timeout_s``). Names
users already type stay as they are (``max_steps``, ``save_steps``: the seed's training
script reads ``MAX_STEPS`` / ``SAVE_STEPS``). Profiles, ``-p`` and the notebooks'
``parameters`` cells all use the same names.

**Renames.** An old name keeps working for one release: profiles and ``-p`` values are
moved to the new name with a deprecation message, and a notebook that still receives
the old name (papermill ``-p``) resolves it with :func:`renamed`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

#: old name -> new name (accepted for one release, with a deprecation message).
RENAMED = {"timeout_s": "infer_timeout_s"}


def deprecation_message(old: str, new: str) -> str:
    return f"parameter {old!r} is deprecated: use {new!r} (the old name is accepted for one release)"


def rename_keys(params: dict, say: Optional[Callable[[str], None]] = None) -> dict:
    """``params`` with every old name of :data:`RENAMED` moved to its new name.

    Args:
        params: parameter name -> value.
        say: where the deprecation message goes (default: a ``DeprecationWarning``).

    Raises:
        ValueError: both the old and the new name are given with different values.
    """
    out = dict(params)
    for old, new in RENAMED.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            raise ValueError(f"{old}={value!r} and {new}={out[new]!r}: give only {new!r} "
                             f"({old!r} is its deprecated name)")
        out[new] = value
        _say(deprecation_message(old, new), say)
    return out


def renamed(old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """In a notebook: the value of ``new``, taken from ``old`` when only that was set.

    The notebook's ``parameters`` cell holds ``old = None``; papermill sets it when a
    user still passes the old name, and this returns it with a deprecation warning.
    """
    if old_value is None:
        return new_value
    _say(deprecation_message(old, new), None)
    return old_value


def _say(message: str, say: Optional[Callable[[str], None]]) -> None:
    if say is not None:
        say(message)
    else:
        warnings.warn(message, DeprecationWarning, stacklevel=3)
