"""Keep secrets out of everything hyport writes.

A variable is secret by its *name* (:func:`is_secret_name`); such variables are dropped
entirely, not masked, so not even the existence of a token leaks into a shared report.
Their *values* are scrubbed from free text (:func:`scrub_text`) in every encoded form
hyport or its tools write (:func:`encoded_forms`), and credentials inside URLs wherever
they appear. Text written elsewhere (a log from another host) can hold secrets this
environment does not know: :func:`scrub_secret_shapes` redacts those recognisable by how
they are written.

Every pattern here is linear in the length of the text (a log line can be 128 KiB): no
repetition can start again at every position of a long run.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shlex
import urllib.parse
from collections import deque
from typing import Iterable, Mapping

from hyport_lib.utils.redact_netrc import CONTEXT_LINES, may_hold_secret, netrc_value_spans

SECRET_MARKERS = ("SECRET", "TOKEN", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "ACCESS")
#: Whole name parts (between ``_``, ``-`` or ``.``) that name a secret without a marker:
#: Huawei Cloud's keys (``HUAWEICLOUD_SDK_AK``, ``OBS_SK``; ``TASK`` holds no ``SK`` part),
#: passwords (``PWD=``, ``MYSQL_PWD``) and ``SSHPASS`` (read by ``sshpass -e``).
SECRET_NAME_PARTS = frozenset({"AK", "SK", "PWD", "SSHPASS"})
#: A part that names a password only as the last of several (``DB_PASS``, ``SMTP_PASS``):
#: alone it is a test's verdict (``PASS: test_a``) or a count (``--pass 2``).
_LAST_SECRET_PARTS = frozenset({"PASS"})
#: The shell's working folders: a name part ``PWD`` that is no password.
_WORKING_FOLDER_NAMES = frozenset({"PWD", "OLDPWD"})
_NAME_PART_SPLIT = re.compile(r"[^A-Z0-9]+")
REDACTED = "[redacted]"
#: ``scheme://user:password@`` or ``scheme://token@``: up to the *last* ``@`` before the
#: host (a password may hold ``@``, quotes or ``:``). The scheme is bounded (32 chars):
#: unbounded, it restarted at every ``.`` of a long ``a.b-c.d...`` run (quadratic).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]{0,31}://)(?P<userinfo>[^/\s]+)@")
_MIN_SECRET_LEN = 4
#: Values of secret-named variables that are settings, not secrets
#: (``TOKENIZERS_PARALLELISM=false``): scrubbing them would rewrite every "false".
_NOT_SECRET_VALUES = {"true", "false", "none", "null", "yes", "no", "on", "off", "auto", "default"}


def _has_secret_part(upper: str) -> bool:
    """``OBS_AK``, ``DB_PASS``: a part of :data:`SECRET_NAME_PARTS`, or a last one of :data:`_LAST_SECRET_PARTS`."""
    parts = [part for part in _NAME_PART_SPLIT.split(upper) if part]
    return not SECRET_NAME_PARTS.isdisjoint(parts) or (
        len(parts) > 1 and parts[-1] in _LAST_SECRET_PARTS)


def is_secret_name(name: str) -> bool:
    """An environment variable that holds a secret, by its name (``HF_TOKEN``, ``HUAWEICLOUD_SDK_SK``)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or (
        upper not in _WORKING_FOLDER_NAMES and _has_secret_part(upper))


def is_secret_parameter(name: str) -> bool:
    """A notebook parameter that holds a secret: a marker anywhere in its name (``hfToken``),
    except inside words that count or name tokens (``max_new_tokens``, ``tokenizer_path``):
    those must reach the report, as part of the command to reproduce."""
    upper = re.sub(r"TOKENS|TOKENIZER", "", name.upper())
    return any(marker in upper for marker in SECRET_MARKERS) or _has_secret_part(upper)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Longest first: a secret that holds another is scrubbed whole."""
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
    """Variables named by ``prefixes`` or ``names``, secret names dropped, URL credentials redacted."""
    environ = os.environ if environ is None else environ
    prefixes = tuple(prefixes)
    wanted = set(names)
    return {
        k: redact_url_credentials(v)
        for k, v in sorted(environ.items())
        if (k.startswith(prefixes) or k in wanted) and not is_secret_name(k)
    }


def secret_forms(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every encoded form (:func:`encoded_forms`) of every secret value of ``environ``, longest first."""
    return sorted({f for v in secret_values(environ) for f in encoded_forms(v)}, key=len, reverse=True)


def _scrubber(environ: Mapping[str, str] | None):
    forms = secret_forms(environ)

    def scrub(text: str) -> str:
        for form in forms:
            if form in text:
                text = text.replace(form, REDACTED)
        text = redact_url_credentials(text) if "://" in text else text
        return redact_netrc_credentials(text)

    return scrub


def scrub_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Every secret value, in every encoded form, URL credentials and netrc passwords
    redacted (a failing command can echo its environment, or print a netrc file)."""
    return _scrubber(environ)(text)


#: An assignment, ``NAME=value``, ``NAME: value``, ``"NAME": "value"``, ``--name=value``, is
#: read in two parts. First its name (quoted or not, with up to two leading dashes) and
#: separator, found without overlap (names and separators never overlap, so
#: ``api: WANDB_API_KEY=x`` yields ``api:`` and then ``WANDB_API_KEY=``) ...
_ASSIGNMENT_HEAD = re.compile(
    r"""(?<![\w.\-])(?P<name>-{0,2}(?P<q>['"]?)[A-Za-z_][\w.\-]*(?P=q))(?P<sep>\s*(?:=|:(?!//))\s*)""")
#: ... then its value (quoted, or up to a space or a delimiter), read only after a name
#: that may be a secret's.
_AUTH_SCHEMES = r"(?i:basic|bearer|digest|negotiate|token)"
#: A value whose credentials :data:`_AUTH_SCHEME` redacted already (its scheme is kept).
_ALREADY_REDACTED = re.compile(rf"(?:{_AUTH_SCHEMES}\s+)?\[redacted\]")
#: A quote never closed on its line (cut short by the long-line split, or by the writer) is
#: the value to the end of the line: the rest of a quoted secret.
_ASSIGNMENT_VALUE = re.compile(
    rf"""{_AUTH_SCHEMES}\s+\[redacted\]|\[redacted\]|"[^"\n]*"?|'[^'\n]*'?"""
    r"""|[^\s,;&'"}\])]+""")
#: ``--name value``: a command-line flag and its value as the next word.
#: Quoted (``--password 'two words'``), and also on the next line after a ``\\`` continuation.
_FLAG_VALUE = re.compile(r"""(?<![\w\-])(?P<name>--[A-Za-z][\w\-]*)(?P<sep>(?:\s|\\\n)+)"""
                         r"""(?P<value>"[^"\n]*"?|'[^'\n]*'?|[^\s\-'"][^\s'"]*)""")
#: Exception and warning class names that hold a secret marker (``KeyError: 'x'``) name no secret.
_EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Warning|Interrupt)$", re.IGNORECASE)
#: Markers whose variables are secret whatever their value looks like (a numeric PIN too).
_ALWAYS_SECRET = ("PASSWORD", "PASSWD", "SECRET")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
#: Credentials recognisable by their shape alone: the prefixes of Hugging Face, GitHub,
#: GitLab (``glpat-`` personal, ``gldt-`` deploy, ``glrt-`` runner, ``glptt-`` trigger
#: tokens), OpenAI-style, Slack and AWS access keys.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{40,}"
    r"|gl(?:pat|dt|rt|ptt|soat)-[A-Za-z0-9_\-]{20,}"
    r"|sk-[A-Za-z0-9_\-]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16})(?![A-Za-z0-9_])")
#: ``Bearer <token>`` anywhere, and the credentials of an ``Authorization`` header whatever
#: its scheme (``Authorization: Basic <base64 of user:password>``): the scheme is kept.
_AUTH_SCHEME = re.compile(
    r"(?i)(?:\b(?P<bearer>bearer)|(?P<header>\b(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)"
    r"(?P<scheme>[A-Za-z][\w\-]{0,31}))\s+(?P<value>[A-Za-z0-9._~+/=\-]{4,})")
#: ``curl -u user:password`` (also ``-uuser:pw``, ``--user``, ``--proxy-user``, ``-U``): the
#: user is kept. Only after ``curl`` and within its next 16 words: ``docker run -u 1000:1000``
#: is a user and group.
_CURL_USER = re.compile(
    r"\bcurl(?:\s+[^\s|;&]+){0,16}?\s+(?:-u\s*|-U\s*|--(?:proxy-)?user(?:\s+|=))(?:\\\n\s*)?"
    r"""(?:(?P<q>['"])[^:'"\n]+:(?P<quoted>[^'"\n]+)(?P=q)|[^\s:'"]+:(?P<value>[^\s'"]+))""")
#: ``sshpass -p password`` (after up to 8 other options).
_SSHPASS = re.compile(
    r"""\bsshpass(?:\s+-[^\sp]\S*){0,8}\s+-p\s*(?:\\\n\s*)?(?P<value>'[^'\n]*'|"[^"\n]*"|[^\s'"]+)""")
#: The markers of a PEM private key block (``RSA``, ``EC``, ``OPENSSH``, ``ENCRYPTED``, PGP's
#: ``... PRIVATE KEY BLOCK``): what lies between them is the key.
_KEY_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----")
_KEY_END = re.compile(r"-----END (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----")


def _secret_assignment(name: str, value: str) -> bool:
    """``name`` as written, dashes and quotes included."""
    if not _secret_name(name):
        return False
    bare = name.strip("-'\"")
    inner = value.strip("'\"").strip()
    if not inner or _ALREADY_REDACTED.fullmatch(inner) or inner.lower() in _NOT_SECRET_VALUES:
        return False  # nothing, already redacted (``Basic [redacted]``), or a setting
    if bare.upper() in _WORKING_FOLDER_NAMES and inner.startswith(("/", "~")):
        return False  # the shell's PWD=/home/user, a folder
    if _NUMBER.fullmatch(inner):  # pad_token_id=0, num_key_value_heads: 8
        return any(marker in bare.upper() for marker in _ALWAYS_SECRET)
    return True


@functools.lru_cache(maxsize=4096)  # a long line repeats its names (``lib64:`` of a path list)
def _secret_name(name: str) -> bool:
    """``name`` as written, dashes and quotes included."""
    bare = name.strip("-'\"")
    return is_secret_parameter(bare) and not _EXCEPTION_NAME.search(bare)


def _unquoted_span(match: re.Match, group) -> tuple[int, int]:
    """The span of ``match``'s ``group``, inside its quotes when quoted (after the opening
    quote only when it was never closed)."""
    start, end = match.span(group)
    text = match.group(group)
    if text[:1] in ("'", '"'):
        closed = len(text) > 1 and text[-1] == text[0]
        return start + 1, end - 1 if closed else end
    return start, end


def _secret_value_spans(text: str) -> list[tuple[int, int]]:
    """Where the values of secret assignments lie in ``text`` (inside their quotes). Every name
    is looked at, also inside the value of a name that holds no secret (``api:
    WANDB_API_KEY=abc``). Linear: each value is read once, and only after a secret's name."""
    spans: list[tuple[int, int]] = []
    covered = 0
    for head in _ASSIGNMENT_HEAD.finditer(text):
        if head.start() < covered or not _secret_name(head.group("name")):
            continue
        value = _ASSIGNMENT_VALUE.match(text, head.end())
        if value is None or not _secret_assignment(head.group("name"), value.group()):
            continue
        spans.append(_unquoted_span(value, 0))
        covered = value.end()
    for flag in _FLAG_VALUE.finditer(text):
        if _secret_assignment(flag.group("name"), flag.group("value")):
            spans.append(_unquoted_span(flag, "value"))
    return spans


def _redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    pieces, written = [], 0
    for start, end in sorted(spans):
        if end <= written:
            continue  # inside a value already redacted
        pieces += [text[written:max(start, written)], REDACTED]
        written = end
    return "".join(pieces) + text[written:] if pieces else text


def _redact_group(pattern: re.Pattern, text: str, *groups: str) -> str:
    """``text`` with the first of ``groups`` that took part in each match of ``pattern`` redacted."""
    return _redact_spans(text, [next(match.span(g) for g in groups if match.span(g) != (-1, -1))
                                for match in pattern.finditer(text)])


def _netrc_value_secret(value: str) -> bool:
    """A value worth redacting: not already redacted, not a setting (``password none``)."""
    inner = value.strip('"').strip()
    return bool(inner) and not _ALREADY_REDACTED.fullmatch(inner) and inner.lower() not in _NOT_SECRET_VALUES


def _netrc_redacted(text: str, context: str = "") -> tuple[str, list[str]]:
    """``text`` with its netrc secrets redacted (:func:`redact_netrc_credentials`), and the values redacted."""
    if not may_hold_secret(text) and not may_hold_secret(context):
        return text, []
    offset = len(context) + 1 if context else 0
    whole = f"{context}\n{text}" if context else text
    spans = [(start - offset, end - offset) for start, end in netrc_value_spans(whole, offset)
             if _netrc_value_secret(whole[start:end])]
    return _redact_spans(text, spans), [text[start:end] for start, end in spans]


def redact_netrc_credentials(text: str, context: str = "") -> str:
    """``machine h login u password p`` -> ``machine h login u password [redacted]``: a netrc
    file printed into a log (:mod:`hyport_lib.utils.redact_netrc` says which shapes count).
    ``context``: the lines before ``text`` (which tell whether its lines continue an entry),
    looked at, not redacted. Prose that says "password" (``wrong password``, ``password is
    required``) is left alone."""
    return _netrc_redacted(text, context)[0]


#: The header lines of an encrypted PEM key (RFC 1421), between its begin marker and its body.
_KEY_HEADERS = ("Proc-Type:", "DEK-Info:")
#: A word of a key's body: base64, at most its padding at the end.
_BASE64_WORD = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _key_line(line: str) -> bool:
    """Whether ``line``, inside a key block whose end marker is not found yet, may be part
    of the key: blank, a header, one base64 word, or ending with a base64 word of 16 or more
    characters (a key printed through a logger, ``[rank0]: MIIEv...``). Any other line (a
    traceback, ``step 1 ok``) ends the block: a begin marker quoted alone (``grep -q --
    '-----BEGIN PRIVATE KEY-----' key.pem`` in a ``set -x`` log) hides no later line."""
    words = line.split()
    if not words or words[0] in _KEY_HEADERS:
        return True
    return _BASE64_WORD.fullmatch(words[-1]) is not None and (len(words) == 1 or len(words[-1]) >= 16)


def _redact_key_blocks(text: str) -> tuple[str, bool]:
    """``text`` with the bodies of its PEM private key blocks redacted (markers kept; also a
    block on one line with ``\\n`` escapes, a key inside JSON), and whether the last block
    is still open at the end of ``text``. Linear: each marker is searched for once. A block
    without its end marker is redacted to the end of its line and over the lines after it
    that may be key (:func:`_key_line`): the rest of a key cut short is still the key."""
    if "PRIVATE KEY" not in text:
        return text, False
    pieces, written = [], 0
    while (begin := _KEY_BEGIN.search(text, written)) is not None:
        pieces += [text[written:begin.end()], REDACTED]
        end = _KEY_END.search(text, begin.end())
        if end is None:
            newline = text.find("\n", begin.end())
            if newline < 0:
                return "".join(pieces), True
            lines = PrivateKeyLines()
            lines.inside = True
            rest = "\n".join(lines.scrub(line) for line in text[newline + 1:].split("\n"))
            if lines.inside:  # all of it may be key: one redaction, as a closed block's
                return "".join(pieces), True
            return "".join(pieces) + "\n" + rest, False
        pieces.append(end.group())
        written = end.end()
    return "".join(pieces) + text[written:], False


#: The first word of a line (quoted or not): a secret's value after a ``\\`` continuation.
_FIRST_WORD = re.compile(r"""\s*(?P<word>"[^"\n]*"?|'[^'\n]*'?|\S+)""")
#: Options whose value is a secret that is not named on its own line.
_SECRET_OPTIONS = {"-p": "sshpass", "-u": "curl", "-U": "curl", "--user": "curl", "--proxy-user": "curl"}


def _secret_continued(line: str) -> bool:
    """Whether ``line`` ends with a secret's name or option and a ``\\`` continuation: its
    value is the first word of the next line (``sshpass -p \\``, ``--password \\``)."""
    stripped = line.rstrip()
    if not stripped.endswith("\\"):
        return False
    words = stripped[:-1].split()
    if not words:
        return False
    last = words[-1]
    if last in _SECRET_OPTIONS:
        return _SECRET_OPTIONS[last] in line
    if last.startswith("--"):
        return _secret_name(last)
    return last.endswith(("=", ":")) and _secret_name(last.rstrip("=:"))


class PrivateKeyLines:
    """Redacts, from text read one line at a time (a log), what only the lines before say is
    a secret: the body of a PEM private key (whether a block is open is carried from line
    to line), a value a ``\\`` continuation moved to the next line (``sshpass -p \\``), a
    netrc entry's lines (``  password p`` after ``machine h`` and ``  login u``) and, in the
    lines after, the netrc secrets redacted so far (``upload refused: login u password p``)."""

    #: Netrc secrets remembered at most (a log that prints many netrc files is no usual one).
    MAX_LEARNED = 64

    def __init__(self) -> None:
        self.inside = False
        self.value_next = False
        self.before: deque[str] = deque(maxlen=CONTEXT_LINES)
        self.secret_before = False  # whether the line before may hold a netrc secret
        self.learned: list[str] = []

    def scrub(self, line: str) -> str:
        """``line`` with what belongs to a private key, or a secret value continued from
        the line before, or a netrc secret, replaced by :data:`REDACTED`."""
        original = line
        continued, self.value_next = self.value_next, _secret_continued(line)
        if continued and not self.inside and (word := _FIRST_WORD.match(line)) is not None:
            line = line[:word.start("word")] + REDACTED + line[word.end("word"):]
        for value in self.learned:
            if value in line:
                line = line.replace(value, REDACTED)
        secret_here = may_hold_secret(line)
        if secret_here or self.secret_before:  # a value may follow a line-final ``password``
            line, values = _netrc_redacted(line, "\n".join(self.before))
            self.learned.extend(v for v in dict.fromkeys(values) if len(v) >= _MIN_SECRET_LEN
                                and v not in self.learned)
            del self.learned[self.MAX_LEARNED:]
        self.before.append(original)
        self.secret_before = secret_here
        return self._scrub_key(line)

    def _scrub_key(self, line: str) -> str:
        if self.inside:
            end = _KEY_END.search(line)
            if end is None:
                if _key_line(line):
                    return REDACTED
                self.inside = False
                return _redact_key_blocks(line)[0]
            self.inside = False
            return REDACTED + end.group() + self._scrub_key(line[end.end():])
        line, self.inside = _redact_key_blocks(line)
        return line


def scrub_secret_shapes(text: str) -> str:
    """Redact secrets recognisable by how they are written, whatever the environment (the
    shapes are the patterns above; across lines read one by one: :class:`PrivateKeyLines`).
    Exception names (``KeyError: 'x'``), settings (``TOKENIZERS_PARALLELISM=false``), the
    shell's ``PWD=/a/folder`` and counts (``pad_token_id=0``) are left alone."""
    if "://" in text:
        text = redact_url_credentials(text)
    text = _redact_key_blocks(text)[0]
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    lower = text.lower()  # the patterns below are tried only where their word is
    if "bearer" in lower or "authorization" in lower:
        text = _redact_group(_AUTH_SCHEME, text, "value")
    if "curl" in text:
        text = _redact_group(_CURL_USER, text, "quoted", "value")
    if "sshpass" in text:
        text = _redact_group(_SSHPASS, text, "value")
    text = redact_netrc_credentials(text)
    return _redact_spans(text, _secret_value_spans(text))


def scrub_obj(obj, environ: Mapping[str, str] | None = None):
    """:func:`scrub_text` of every string in ``obj``, keys included."""
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
    """Scrubbed *by structure*, so that it stays valid JSON; text that does not parse
    (half-written by a dying process) is scrubbed as text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return scrub_text(text, environ)
    return json.dumps(scrub_obj(data, environ), indent=indent, ensure_ascii=False) + "\n"


def child_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's, plus ``extra``: secrets pass (a training job may need its token);
    hyport's *outputs* never hold them."""
    env = dict(os.environ)
    env.update(extra or {})
    return env
