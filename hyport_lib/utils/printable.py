"""Text made fit to print: text from outside (a log, a model's error) without what would act
on the user's terminal (escape sequences) or make a text file binary to grep (NUL), and an
exception said in one line.

A usage error (:data:`USAGE_ERRORS`) is the user asking for something that cannot be done
as asked: the command line says it in one line and exits 2 (``hyport_lib.commands._cli``);
the workbook's form says the same line under the field it names.
"""

from __future__ import annotations

import re

#: A terminal escape sequence: CSI (colours, cursor moves: ``ESC [ ... final``), OSC (title,
#: hyperlink: ``ESC ] ... BEL`` or ``ESC ] ... ESC \``) or a two-character escape. Bounded
#: repetitions, so that a line of unterminated escapes stays linear.
ESCAPE_SEQUENCE = re.compile(
    r"\x1b(?:\[[0-?]{0,64}[ -/]{0,16}[@-~]|\][^\x07\x1b]{0,4096}(?:\x07|\x1b\\)|[@-Z\\-_])"
    r"|\x9b[0-?]{0,64}[ -/]{0,16}[@-~]")
#: C0, DEL and C1 control characters.
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str, keep: str = "\t") -> str:
    """``text`` without escape sequences, its control characters but those in ``keep``
    shown as ``\\xNN``."""
    if _ANY_CONTROL.search(text) is None:
        return text
    text = ESCAPE_SEQUENCE.sub("", text)
    return _ANY_CONTROL.sub(lambda m: m.group() if m.group() in keep else f"\\x{ord(m.group()):02x}", text)


def shortened(text, chars: int) -> str:
    """``text`` on one line (each run of whitespace one space), cut to ``chars`` with "…"."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= chars else text[:chars - 1] + "…"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


#: Exceptions that mean "the user asked for something that cannot be done as asked".
USAGE_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, PermissionError, RuntimeError)


def one_line(exc: BaseException) -> str:
    """:func:`first_line`, but an OSError with a file says ``<why>: <file>``, not its errno."""
    if isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)) \
            and exc.filename and exc.strerror:
        return f"{exc.strerror}: {exc.filename}".splitlines()[0]
    return first_line(exc)
