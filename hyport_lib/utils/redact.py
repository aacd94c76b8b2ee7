"""Keep secrets out of everything hyport writes.

A variable is secret when its *name* contains one of :data:`SECRET_MARKERS`
(case-insensitive). Such variables are dropped entirely, not masked, so that neither
their value nor the fact that a particular token exists leaks into a shared report.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

SECRET_MARKERS = ("SECRET", "TOKEN", "KEY", "PASSWORD", "CREDENTIAL", "AUTH", "ACCESS")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret variables, longest first (for scrubbing free text)."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= 4}
    return sorted(values, key=len, reverse=True)


def filter_environ(prefixes: Iterable[str], names: Iterable[str] = (),
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables whose name starts with one of ``prefixes`` or is in ``names``,
    with every secret-looking name removed."""
    environ = os.environ if environ is None else environ
    prefixes = tuple(prefixes)
    wanted = set(names)
    return {
        k: v
        for k, v in sorted(environ.items())
        if (k.startswith(prefixes) or k in wanted) and not is_secret_name(k)
    }


def scrub_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace any secret value that appears verbatim in ``text``.

    Used on logs and exception messages before they are written, because a failing
    command can echo its environment.
    """
    for value in secret_values(environ):
        text = text.replace(value, "[redacted]")
    return text


def scrub_obj(obj, environ: Mapping[str, str] | None = None):
    """``obj`` with :func:`scrub_text` applied to every string in it (keys included).

    Scrub *before* serialising: in JSON text a value with quotes, backslashes or
    non-ASCII characters is escaped and would no longer match.
    """
    values = secret_values(environ)
    if not values:
        return obj

    def walk(item):
        if isinstance(item, str):
            for value in values:
                item = item.replace(value, "[redacted]")
            return item
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(walk(v) for v in item)
        return item

    return walk(obj)


def child_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for processes hyport starts: the parent's, plus ``extra``.

    Secrets are passed through unchanged (a training job may need its token); it is
    hyport's *outputs* that never contain them.
    """
    env = dict(os.environ)
    env.update(extra or {})
    return env
