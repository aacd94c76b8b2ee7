"""Text from outside (a log, a model's error) made safe to print: escape sequences would act
on the user's terminal, and NUL makes a text file binary to grep.
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
