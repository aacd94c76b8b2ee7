"""Keep secrets out of everything hyport writes.

A variable is secret when its *name* contains one of :data:`SECRET_MARKERS`
(case-insensitive). Such variables are dropped entirely, not masked, so that neither
their value nor the fact that a particular token exists leaks into a shared report.

Their *values* are scrubbed from free text (logs, notebooks, HTML) in every encoded form
hyport or the tools it drives write: as is, as a JSON string (ASCII-only and not, and
JSON inside JSON, as a notebook stores an injected parameter), as a Python literal
(``repr`` / ``ascii``), HTML-escaped (also with numeric character references) and
URL-encoded. Credentials inside URLs (``scheme://user:password@host``) are redacted
wherever they appear, whatever the variable is called.

Text written elsewhere (a log copied from another host, a job's output) can hold secrets
this environment does not know: :func:`scrub_secret_shapes` redacts those recognisable by
how they are written (``HF_TOKEN=...``, ``"api_key": "..."``, ``Bearer ...``, ``hf_...``).
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shlex
import urllib.parse
from typing import Iterable, Mapping

SECRET_MARKERS = ("SECRET", "TOKEN", "KEY", "PASSWORD", "CREDENTIAL", "AUTH", "ACCESS")
REDACTED = "[redacted]"
#: ``scheme://user:password@`` or ``scheme://token@``: everything up to the *last* ``@``
#: before the host goes (a password may hold ``@``, quotes or ``:``).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s]+)@")
_MIN_SECRET_LEN = 4
#: Values of secret-named variables that are settings, not secrets
#: (``TOKENIZERS_PARALLELISM=false``): scrubbing them would rewrite every "false".
_NOT_SECRET_VALUES = {"true", "false", "none", "null", "yes", "no", "on", "off", "auto", "default"}


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def is_secret_parameter(name: str) -> bool:
    """A notebook parameter that holds a secret: a secret marker anywhere in its name
    (``hf_token``, ``hfToken``, ``wandbapikey``), as for environment variables, except
    inside the words that only count or name tokens (``max_new_tokens``,
    ``tokenizer_path``): those must reach the report, they are part of the command to
    reproduce."""
    upper = re.sub(r"TOKENS|TOKENIZER", "", name.upper())
    return any(marker in upper for marker in SECRET_MARKERS + ("PASSWD",))


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret variables, longest first (for scrubbing free text)."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= _MIN_SECRET_LEN
              and v.strip().lower() not in _NOT_SECRET_VALUES}
    return sorted(values, key=len, reverse=True)


@functools.lru_cache(maxsize=256)
def encoded_forms(value: str) -> tuple[str, ...]:
    """``value`` as it appears once written in JSON, Python, HTML or a URL (longest first)."""
    forms = {value}
    for text in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
                 repr(value)[1:-1], ascii(value)[1:-1]):
        forms.add(text)
    for text in list(forms):  # a notebook is JSON holding code that holds the literal
        forms.add(json.dumps(text)[1:-1])
        forms.add(json.dumps(text, ensure_ascii=False)[1:-1])
    for text in list(forms):
        forms.add(html.escape(text))
        forms.add(html.escape(text, quote=False))
        forms.add(html.escape(text).encode("ascii", "xmlcharrefreplace").decode("ascii"))
    forms.add(urllib.parse.quote(value, safe=""))
    forms.add(urllib.parse.quote(value))  # the default keeps "/"
    forms.add(urllib.parse.quote_plus(value))
    forms.add(repr(value.encode("utf-8"))[2:-1])  # a bytes literal
    forms.add(shlex.quote(value))
    return tuple(sorted((f for f in forms if len(f) >= _MIN_SECRET_LEN), key=len, reverse=True))


def redact_url_credentials(text: str) -> str:
    """``https://user:pw@host`` -> ``https://[redacted]@host``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def filter_environ(prefixes: Iterable[str], names: Iterable[str] = (),
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables whose name starts with one of ``prefixes`` or is in ``names``, with every
    secret-looking name removed and credentials inside URL values redacted."""
    environ = os.environ if environ is None else environ
    prefixes = tuple(prefixes)
    wanted = set(names)
    return {
        k: redact_url_credentials(v)
        for k, v in sorted(environ.items())
        if (k.startswith(prefixes) or k in wanted) and not is_secret_name(k)
    }


def _scrubber(environ: Mapping[str, str] | None):
    forms = sorted({f for v in secret_values(environ) for f in encoded_forms(v)}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for form in forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return redact_url_credentials(text) if "://" in text else text

    return scrub


def scrub_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace every secret value, in every encoded form, and URL credentials in ``text``.

    Used on logs, notebooks, HTML and exception messages before they are written,
    because a failing command can echo its environment.
    """
    return _scrubber(environ)(text)


#: An assignment, ``NAME=value``, ``NAME: value``, ``"NAME": "value"``, ``--name=value``, is
#: read in two parts. First its name (quoted or not, with up to two leading dashes) and
#: separator, found without overlap (names and separators never overlap, so
#: ``api: WANDB_API_KEY=x`` yields ``api:`` and then ``WANDB_API_KEY=``) ...
_ASSIGNMENT_HEAD = re.compile(
    r"""(?<![\w.\-])(?P<name>-{0,2}(?P<q>['"]?)[A-Za-z_][\w.\-]*(?P=q))(?P<sep>\s*(?:=|:(?!//))\s*)""")
#: ... then its value (quoted, or up to a space or a delimiter), read only after a name
#: that may be a secret's.
_ASSIGNMENT_VALUE = re.compile(r"""\[redacted\]|"[^"\n]*"|'[^'\n]*'|[^\s,;&'"}\])]+""")
#: ``--name value``: a command-line flag and its value as the next word.
_FLAG_VALUE = re.compile(r"""(?<![\w\-])(?P<name>--[A-Za-z][\w\-]*)(?P<sep>\s+)(?P<value>[^\s\-'"][^\s'"]*)""")
#: Exception and warning class names that hold a secret marker (``KeyError: 'x'``) name no secret.
_EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Warning|Interrupt)$", re.IGNORECASE)
#: Markers whose variables are secret whatever their value looks like (a numeric PIN too).
_ALWAYS_SECRET = ("PASSWORD", "PASSWD", "SECRET")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
#: Credentials recognisable by their shape alone: ``Bearer <token>`` and the prefixes of
#: Hugging Face, GitHub, OpenAI-style, Slack and AWS access keys.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{40,}"
    r"|sk-[A-Za-z0-9_\-]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16})(?![A-Za-z0-9_])")
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer)\s+(?P<value>[A-Za-z0-9._~+/=\-]{8,})")


def _secret_assignment(name: str, value: str) -> bool:
    """Whether ``name`` (as written, dashes and quotes included) holding ``value`` is a secret."""
    if not _secret_name(name):
        return False
    bare = name.strip("-'\"")
    inner = value.strip("'\"").strip()
    if not inner or inner == REDACTED or inner.lower() in _NOT_SECRET_VALUES:
        return False
    if _NUMBER.fullmatch(inner):  # pad_token_id=0, num_key_value_heads: 8
        return any(marker in bare.upper() for marker in _ALWAYS_SECRET)
    return True


def _secret_name(name: str) -> bool:
    """Whether ``name`` (as written, dashes and quotes included) may hold a secret."""
    bare = name.strip("-'\"")
    return is_secret_parameter(bare) and not _EXCEPTION_NAME.search(bare)


def _value_span(value: re.Match) -> tuple[int, int]:
    """The value's span, inside its quotes when it is quoted."""
    start, end = value.span()
    text = value.group()
    if text[:1] in ("'", '"') and len(text) > 1 and text[-1] == text[0]:
        return start + 1, end - 1
    return start, end


def _secret_value_spans(text: str) -> list[tuple[int, int]]:
    """Where the values of secret assignments lie in ``text`` (inside their quotes), in order.

    Every name is looked at, also inside the value of a name that holds no secret (in
    ``api: WANDB_API_KEY=abc``, ``api`` would hold ``WANDB_API_KEY=abc``); a name inside a
    value already found secret is covered by it. Linear in the line's length: each value
    is read once, and only after a secret's name.
    """
    spans: list[tuple[int, int]] = []
    covered = 0
    for head in _ASSIGNMENT_HEAD.finditer(text):
        if head.start() < covered or not _secret_name(head.group("name")):
            continue
        value = _ASSIGNMENT_VALUE.match(text, head.end())
        if value is None or not _secret_assignment(head.group("name"), value.group()):
            continue
        spans.append(_value_span(value))
        covered = value.end()
    for flag in _FLAG_VALUE.finditer(text):
        if _secret_assignment(flag.group("name"), flag.group("value")):
            spans.append(flag.span("value"))
    return spans


def _redact_assignments(text: str) -> str:
    spans = _secret_value_spans(text)
    if not spans:
        return text
    pieces, written = [], 0
    for start, end in sorted(spans):
        if end <= written:
            continue  # inside a value already redacted
        pieces += [text[written:max(start, written)], REDACTED]
        written = end
    return "".join(pieces) + text[written:]


def scrub_secret_shapes(text: str) -> str:
    """Redact secrets recognisable by how they are written, whatever the environment.

    :func:`scrub_text` knows a secret only by its value in the current environment; a log
    copied from another host, or written by a process that had a token this one lacks,
    holds values it cannot know. This redacts the value of every assignment to a secret
    name (:func:`is_secret_parameter`: ``HF_TOKEN=...``, ``password: ...``,
    ``"api_key": "..."``, ``--hf-token=...``, ``--password ...``), the token after
    ``Bearer``, and tokens with a well-known prefix (``hf_``, ``ghp_``, ``sk-``, ``AKIA`` ...),
    plus URL credentials. Exception names (``KeyError: 'x'``), settings
    (``TOKENIZERS_PARALLELISM=false``) and numbers given to names that only count or
    number tokens or keys (``pad_token_id=0``) are left alone.
    """
    if "://" in text:
        text = redact_url_credentials(text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group('scheme')} {REDACTED}", text)
    return _redact_assignments(text)


def scrub_obj(obj, environ: Mapping[str, str] | None = None):
    """``obj`` with :func:`scrub_text` applied to every string in it (keys included)."""
    scrub = _scrubber(environ)

    def walk(item):
        if isinstance(item, str):
            return scrub(item)
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(walk(v) for v in item)
        return item

    return walk(obj)


def scrub_json_text(text: str, indent: int = 2, environ: Mapping[str, str] | None = None) -> str:
    """A JSON document scrubbed *by structure*: every string value (every encoded form
    inside it included) is scrubbed, and the result is still valid JSON. Text that does
    not parse (half-written by a dying process) is scrubbed as text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return scrub_text(text, environ)
    return json.dumps(scrub_obj(data, environ), indent=indent, ensure_ascii=False) + "\n"


def child_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for processes hyport starts: the parent's, plus ``extra``.

    Secrets are passed through unchanged (a training job may need its token); it is
    hyport's *outputs* that never contain them.
    """
    env = dict(os.environ)
    env.update(extra or {})
    return env
