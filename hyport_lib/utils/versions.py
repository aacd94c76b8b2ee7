"""Version strings compared as numbers, and flash-attn's API by version: one answer for the
scan (the version a project pins) and the drop-in (which serves that version's API).
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


#: flash-attn releases a pin is tried against, oldest first (one per minor version,
#: its last patch): enough to tell which ``unpad_input`` a range of versions gives.
FLASH_ATTN_RELEASES = ("1.0.9", "2.0.9", "2.1.2", "2.2.5", "2.3.6", "2.4.3", "2.5.9", "2.6.3",
                       "2.7.4.post1", "2.8.3")


def pinned_version(spec: str) -> Optional[str]:
    """The flash-attn version whose API code pinned by ``spec`` expects, or None when the
    pin does not tell (it allows versions on both sides of 2.7, or none that exist).

    ``"==2.6.3 (requirements.txt:2)"`` -> ``"2.6.3"``; ``"<2.7"`` -> ``"2.6.3"`` (the newest
    release it allows); ``"~=2.6"`` -> None (2.6 and 2.7 both qualify).
    """
    text = re.sub(r"\s*\(.*\)\s*$", "", str(spec or "")).strip()
    # ==X, ===X, conda's =X, and a local build tag (==2.6.3+cu122) pin X itself
    exact = re.fullmatch(r"(?:===?|=)\s*(\d+(?:\.\d+)*(?:\.post\d+)?)(?:\+[\w.]+)?", text)
    if exact:
        return exact.group(1)
    try:
        from packaging.specifiers import SpecifierSet

        allowed = [v for v in FLASH_ATTN_RELEASES if SpecifierSet(text).contains(v, prereleases=True)]
    except (ImportError, ValueError):
        return None
    if not allowed or len({unpad_input_values(v) for v in allowed}) > 1:
        return None
    return allowed[-1]
