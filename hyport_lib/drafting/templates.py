"""The Jinja environment of the blog drafts and their templates' filters.

The drafts are Markdown: nothing is escaped (``autoescape`` off); recorded texts are
marked by the filters ``code``, ``quote``, ``recorded`` and ``fenced``
(:mod:`~hyport_lib.drafting.markdown`). A value missing from an older record is Jinja's
chainable ``Undefined`` (``r.data.scan.hits`` when ``scan`` is), which the filters show as
``—``. Templates are found by path under the ``hyport_lib`` package (:mod:`hyport_lib.drafting`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import jinja2

import hyport_lib
from hyport_lib.drafting.markdown import code, fenced, quote, recorded, row
from hyport_lib.drafting.values import is_number, num, ratio

#: The languages of the drafts.
LANGS = ("en", "zh")

#: A fence line of the drafts (``fenced`` makes each longer than what it holds).
_FENCE = re.compile(r"^(`{3,})[^`]*$")


def check_lang(lang: str) -> str:
    """``lang`` when there are drafts in it; else a ValueError naming those there are."""
    if lang not in LANGS:
        raise ValueError(f"lang={lang!r}: expected one of {', '.join(LANGS)}")
    return lang


def frame_template(lang: str) -> str:
    """The frame of the draft in ``lang``: title, background, the stages, caveats, commands."""
    return f"report/templates/blog/blog.{check_lang(lang)}.md.j2"


def stage_template(stage_name: str, lang: str) -> str:
    """The template of a stage's own part of the draft (``title``, ``section``,
    ``appendix`` macros)."""
    return f"{stage_name}/blog.{lang}.md.j2"


def _given(value: Any) -> Any:
    """``value``, or None where the record did not hold it."""
    return None if isinstance(value, jinja2.Undefined) else value


def is_record(value: Any) -> bool:
    """A recorded object (a dict now, a typed result's dataclass later)."""
    value = _given(value)
    return isinstance(value, Mapping) or (dataclasses.is_dataclass(value) and not isinstance(value, type))


def as_list(value: Any) -> list:
    """``value`` as a list when it is one (an odd record's string or number is no list)."""
    value = _given(value)
    return list(value) if isinstance(value, (list, tuple)) else []


def records(value: Any) -> list:
    """The recorded objects of a list, others left out (an odd record's ``[3, None]``)."""
    return [item for item in as_list(value) if is_record(item)]


class Attempt(NamedTuple):
    """What :func:`attempt` gives a template: the text, or why there is none."""

    text: str
    error: str


def attempt(part: Callable, *args: Any) -> Attempt:
    """``part(*args)`` (a macro) with the exception it raised as text: odd recorded data makes
    a part of the draft say it could not be drafted, it never stops the draft."""
    try:
        return Attempt(str(part(*args)), "")
    except Exception as exc:  # noqa: BLE001 — odd recorded data must not stop the draft
        return Attempt("", f"{type(exc).__name__}: {exc}")


@jinja2.pass_context
def _recorded(context, value: Any, lang: str = "") -> str:
    """:func:`~hyport_lib.drafting.markdown.recorded` in the draft's language (or ``lang``)."""
    return recorded(_given(value), lang or context.get("lang", "en"))


def _row(*cells: Any) -> str:
    return row(*("" if _given(c) is None else c for c in cells))


def header(*cells: Any) -> str:
    """A Markdown table's header row and the rule under it."""
    return f"{_row(*cells)}\n|" + "---|" * len(cells)


@lru_cache(maxsize=8)
def _environment(search_path: tuple[str, ...]) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(list(search_path)),
                             undefined=jinja2.ChainableUndefined, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             extensions=["jinja2.ext.do"])
    env.filters.update(code=lambda v: code(_given(v)), quote=lambda v: "\n".join(quote(_given(v))),
                       fenced=lambda v, info="": "\n".join(fenced(str(_given(v)), info)),
                       num=lambda v: num(_given(v)), ratio=ratio, recorded=_recorded,
                       as_list=as_list, records=records)
    env.tests.update(record=is_record, figure=lambda v: is_number(_given(v)))
    env.globals.update(row=_row, header=header, attempt=attempt)
    return env


def environment() -> jinja2.Environment:
    """The drafts' environment over the package's folders as they are now (a stage's folder
    may be added to ``hyport_lib.__path__``)."""
    return _environment(tuple(hyport_lib.__path__))


def has_template(name: str) -> bool:
    try:
        environment().get_template(name)
    except jinja2.TemplateNotFound:
        return False
    return True


def tidy(text: str) -> str:
    """A rendered draft with one blank line between blocks and no trailing spaces; fenced
    blocks (recorded texts) kept as they are."""
    out: list[str] = []
    fence = ""
    for line in text.splitlines():
        if fence:
            out.append(line)
            fence = "" if line.rstrip() == fence else fence
            continue
        line = line.rstrip()
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group(1)
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return "\n".join(out) + "\n"
