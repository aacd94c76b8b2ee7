"""A log rewritten without secrets (secret values of the environment, URL credentials, netrc
passwords), streamed: a log of gigabytes with no secret in it is only read, in blocks of bounded
size, and never rewritten.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import stat
from pathlib import Path
from typing import Mapping, Optional, Sequence

from hyport_lib.utils.files import atomic_target
from hyport_lib.utils.redact import REDACTED, redact_netrc_credentials, redact_url_credentials, secret_forms
from hyport_lib.utils.redact_netrc import CONTEXT_LINES

#: Bytes of a log scrubbed at a time (:func:`scrub_log`): its memory stays bounded.
_SCRUB_BLOCK = 8 * 2**20
#: What a line holds (any case) when it may hold a URL's credentials or a netrc secret.
_SCRUB_NEEDLES = (b"passw", b"account", b"://")
#: Bytes before a line looked at for the netrc entry it may continue (``machine h``, ``login u``).
_SCRUB_CONTEXT = 4096


def scrub_log(path: os.PathLike | str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Rewrite a log without secret values, URL credentials and netrc passwords; True when it
    changed. Streamed in blocks of whole lines: only lines that a byte search finds holding
    a secret's value, ``passw``, ``account`` or ``://`` (and the line after each: a netrc value
    may stand there) are decoded and scrubbed, so a log with no secret is only read; rewritten
    (atomically, as UTF-8) only when something changed; a missing one
    is left alone."""
    path = Path(path)
    if not path.is_file():
        return False
    forms = [form.encode("utf-8", "surrogateescape") for form in secret_forms(environ)]
    hold = max((len(form) for form in forms if b"\n" in form), default=0)  # such a form spans lines
    as_text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # what is rewritten is UTF-8
    with open(path, "rb") as source, contextlib.ExitStack() as rewrite:
        out = None
        done, carry, before, after_hit = 0, b"", b"", False
        while True:
            data = source.read(_SCRUB_BLOCK)
            buffer = carry + data
            cut = buffer.rfind(b"\n", 0, max(0, len(buffer) - hold)) + 1 if data else len(buffer)
            if cut == 0 and data:
                if len(buffer) < 4 * _SCRUB_BLOCK:
                    carry = buffer
                    continue
                cut = len(buffer)  # a line this long is scrubbed in parts
            work, carry = buffer[:cut], buffer[cut:]
            scrubbed, after_hit = _scrub_block(work, forms, before, after_hit)
            if scrubbed != work and out is None:
                tmp = rewrite.enter_context(atomic_target(path, stat.S_IMODE(path.stat().st_mode)))
                out = rewrite.enter_context(open(tmp, "wb"))
                with open(path, "rb") as again:  # the blocks before, as they were
                    for left in range(done, 0, -_SCRUB_BLOCK):
                        piece = again.read(min(_SCRUB_BLOCK, left))
                        if not piece:
                            raise OSError(f"{path}: shrank while it was scrubbed")
                        out.write(as_text.decode(piece).encode("utf-8"))
            if out is not None:
                out.write(as_text.decode(scrubbed).encode("utf-8"))
            done += len(work)
            before = (before + work[-_SCRUB_CONTEXT:])[-_SCRUB_CONTEXT:]
            if not data:
                break
        if out is not None:
            out.write(as_text.decode(b"", final=True).encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
    return out is not None


def _scrub_block(work: bytes, forms: Sequence[bytes], before: bytes, after_hit: bool) -> tuple[bytes, bool]:
    """``work`` (whole lines) scrubbed, and whether its last line was one to scrub (the next
    block's first line then is too). ``before``: the bytes before it, the context of its first lines."""
    for form in forms:
        if form in work:
            work = work.replace(form, REDACTED.encode())
    lower = work.lower()
    starts = {0} if after_hit and work else set()
    after_hit = False
    for needle in _SCRUB_NEEDLES:
        at = lower.find(needle)
        while at >= 0:
            line_end = work.find(b"\n", at)
            starts.add(work.rfind(b"\n", 0, at) + 1)
            if 0 <= line_end < len(work) - 1:
                starts.add(line_end + 1)
            else:
                after_hit = line_end >= 0
                break
            at = lower.find(needle, line_end + 1)
    pieces, written = [], 0
    for start in sorted(starts):
        end = work.find(b"\n", start)
        end = len(work) if end < 0 else end
        line = work[start:end].decode("utf-8", "surrogateescape")
        near = work[max(0, start - _SCRUB_CONTEXT):start]
        context = (before[len(near) - _SCRUB_CONTEXT:] if len(near) < _SCRUB_CONTEXT else b"") + near
        context = b"\n".join(context.split(b"\n")[-CONTEXT_LINES - 1:-1]).decode("utf-8", "surrogateescape")
        scrubbed = redact_netrc_credentials(redact_url_credentials(line) if "://" in line else line, context)
        if scrubbed != line:
            pieces += [work[written:start], scrubbed.encode("utf-8", "surrogateescape")]
            written = end
    return b"".join(pieces) + work[written:] if pieces else work, after_hit
