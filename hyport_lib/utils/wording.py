"""Counts in words: "1 card", "2 cards", never "1 cards" or "1 card(s)" where the count is known."""

from __future__ import annotations

from typing import Optional

#: Endings whose plural adds "es" (process -> processes, box -> boxes, batch -> batches).
_ES_ENDINGS = ("s", "x", "z", "ch", "sh")


def plural(noun: str, count: float, plural_form: Optional[str] = None) -> str:
    """``noun`` as ``count`` asks for: singular for exactly 1, else the plural (``plural_form``
    where it is not the regular one, e.g. ``"indices"``)."""
    if count == 1:
        return noun
    if plural_form is not None:
        return plural_form
    return noun + ("es" if noun.endswith(_ES_ENDINGS) else "s")


def counted(count: int, noun: str, plural_form: Optional[str] = None) -> str:
    """``count`` and ``noun`` in agreement, thousands grouped: ``1 card``, ``1,024 tensors``."""
    return f"{count:,} {plural(noun, count, plural_form)}"
