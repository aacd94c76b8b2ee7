"""Version strings compared as numbers, and what flash-attn's API looked like by version.

Here rather than in the shim so that the scan (which reports the version a project pins)
and the attention package (which serves that version's API) share one answer without
importing each other.
"""

from __future__ import annotations

import re
from typing import Optional

#: flash-attn 2.7 made ``bert_padding.unpad_input`` return 5 values instead of 4.
UNPAD_FIVE_FROM = (2, 7)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.7.4.post1+cu12"`` -> ``(2, 7, 4)``: the leading numeric parts."""
    parts = []
    for piece in str(version).split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def legacy_unpad(version: str) -> bool:
    """flash-attn before 2.7: ``bert_padding.unpad_input`` returns 4 values, not 5."""
    return version_tuple(version) < UNPAD_FIVE_FROM


def unpad_input_values(version: str) -> int:
    """How many values ``flash_attn.bert_padding.unpad_input`` returns in ``version``."""
    return 4 if legacy_unpad(version) else 5


def pinned_version(spec: str) -> Optional[str]:
    """The first version a pin names (``"==2.6.3 (requirements.txt:2)"`` -> ``"2.6.3"``;
    ``<2.7`` -> ``"2.7"``); None when it names none."""
    match = re.search(r"(\d+(?:\.\d+)+(?:\.post\d+)?)", str(spec or ""))
    return match.group(1) if match else None
