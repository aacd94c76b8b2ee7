"""The Jinja environment of the blog drafts, their templates' filters and their catalogues.

The drafts are Markdown: nothing is escaped (``autoescape`` off); recorded texts are
marked by the filters ``code``, ``quote``, ``recorded`` and ``fenced``, so that a reader
tells the drafts' own sentences from what tools wrote. A value missing from an older
record is Jinja's chainable ``Undefined`` (``r.data.scan.hits`` when ``scan`` is), which
the filters show as ``—``. One template serves every language (``jinja2.ext.i18n``): the
catalogues merge (:func:`translations`), so the same English says the same thing in every
part of a draft.
"""

from __future__ import annotations

import dataclasses
import gettext
import io
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jinja2
from babel.messages import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

import hyport_lib
from hyport_lib.drafting.values import MISSING, is_number, num, ratio

#: The languages of the drafts: the templates' own (English), then those of the catalogues.
LANGS = ("en", "zh")
#: The frame of the drafts: title, background, the stages, caveats, commands.
FRAME_TEMPLATE = "report/templates/blog/blog.md.j2"

#: A fence line of the drafts (``fenced`` makes each longer than what it holds).
_FENCE = re.compile(r"^(`{3,})[^`]*$")


def stage_template(stage_name: str) -> str:
    """The template of a stage's own part of the draft (macros ``title``, ``section``, ``appendix``)."""
    return f"{stage_name}/blog.md.j2"


def translations(search_path: tuple[str, ...], lang: str) -> gettext.NullTranslations:
    """The text of ``lang``: the templates' own for English, else the catalogues beside the
    frame and each stage's template, merged (ValueError where two give one English text
    two translations)."""
    if lang == LANGS[0]:
        return gettext.NullTranslations()
    paths = [path for root in map(Path, search_path)
             for path in (root / Path(FRAME_TEMPLATE).with_name(f"blog.{lang}.po"), *sorted(root.glob(f"*/blog.{lang}.po")))
             if path.is_file()]
    merged, first = Catalog(locale=lang), {}
    for path in paths:
        with path.open("rb") as handle:
            for message in read_po(handle):
                if not message.id or not message.string:  # the header; a text not translated yet
                    continue
                text, where = first.setdefault((message.context, message.id), (message.string, path))
                if text != message.string:
                    raise ValueError(f"{path}: {message.id!r} is translated otherwise in {where}")
                merged.add(message.id, message.string, context=message.context)
    compiled = io.BytesIO()
    write_mo(compiled, merged)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def _given(value: Any) -> Any:
    """``value``, or None where the record did not hold it."""
    return None if isinstance(value, jinja2.Undefined) else value


def code(value: Any) -> str:
    """``value`` as a Markdown code span (backticks inside are fenced by longer ones)."""
    value = _given(value)
    text = " ".join(str(value).split()) if value is not None else MISSING
    if not text:
        return MISSING
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if fence != "`" or text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def row(*cells: Any) -> str:
    """One Markdown table row, one line, pipes escaped (also inside code spans, as GFM
    asks); a value the record did not hold is an empty cell."""
    texts = (str("" if _given(c) is None else c).replace("|", "\\|").replace("\n", " ") for c in cells)
    return "| " + " | ".join(texts) + " |"


def header(*cells: Any) -> str:
    """A Markdown table's header row and the rule under it."""
    return f"{row(*cells)}\n|" + "---|" * len(cells)


def quote(text: Any) -> str:
    """A recorded message as a Markdown quotation (every line marked), then a blank line."""
    body = str(_given(text) or "").strip("\n")
    if not body:
        return ""
    return "\n".join([f"> {line}".rstrip() for line in body.splitlines()] + [""])


def fenced(value: Any, info: str = "") -> str:
    """``value`` in a fenced block long enough never to be closed by what it holds."""
    text = str(_given(value))
    fence = "```"
    while fence in text:
        fence += "`"
    return "\n".join([f"{fence}{info}", text.rstrip("\n"), fence, ""])


def recorded(value: Any, lang: str) -> str:
    """A recorded free text for a table cell: plain in English, code in Chinese (so that
    the Chinese draft holds no English outside marked recorded text)."""
    value = _given(value)
    if value is None or value == "":
        return MISSING
    return code(value) if lang == "zh" else " ".join(str(value).split())


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


@lru_cache(maxsize=16)
def _environment(search_path: tuple[str, ...], lang: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(list(search_path)),
                             undefined=jinja2.ChainableUndefined, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             extensions=["jinja2.ext.do", "jinja2.ext.i18n"])
    # newstyle: _("... %(name)s ...", name=value) fills its placeholders after translating.
    env.install_gettext_translations(translations(search_path, lang), newstyle=True)
    env.filters.update(code=code, quote=quote, fenced=fenced, num=lambda v: num(_given(v)), ratio=ratio,
                       recorded=lambda v, language=lang: recorded(v, language), as_list=as_list, records=records)
    env.tests.update(record=is_record, figure=lambda v: is_number(_given(v)))
    env.globals.update(row=row, header=header, attempt=attempt)
    return env


def environment(lang: str) -> jinja2.Environment:
    """The drafts' environment in ``lang`` over the package's folders as they are now (a
    stage's folder may be added to ``hyport_lib.__path__``)."""
    if lang not in LANGS:
        raise ValueError(f"lang={lang!r}: expected one of {', '.join(LANGS)}")
    return _environment(tuple(hyport_lib.__path__), lang)


def has_template(name: str) -> bool:
    return any((Path(root) / name).is_file() for root in hyport_lib.__path__)


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
