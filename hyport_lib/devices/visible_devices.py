"""The visible-devices variable (``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES``):
what the runtime will actually see, the ids the grid pins workers to, and a judgement that
names the fix."""

from __future__ import annotations

import re
from typing import Optional

from hyport_lib.results import Check


def _is_ascend_var(var_name: str) -> bool:
    return var_name.upper().startswith("ASCEND")


def parse_visible_devices(value: str, var_name: str = "ASCEND_RT_VISIBLE_DEVICES") -> list[int]:
    """The card indices the runtime will actually see: Ascend stops reading at the first space
    (``"1, 2,3"`` -> ``[1]``); CUDA (as torch parses it) strips each entry, stops at the first
    that is not a number and shows no card when one is listed twice. UUIDs give ``[]``."""
    text = value.strip()
    if _is_ascend_var(var_name):
        text = text.split()[0] if text else ""
    seen: list[int] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not (entry.isascii() and entry.isdigit()):
            break
        index = int(entry)
        if index in seen:
            return [] if not _is_ascend_var(var_name) else seen
        seen.append(index)
    return seen


def inherited_card_ids(var: str, value: str) -> list[int]:
    """Host card ids an inherited visible-devices variable lists: the grid pins each worker
    with ``var=<id>``, so what it cannot map (every card hidden, a UUID, a range, an empty
    entry, a duplicate, an Ascend space) is a ValueError naming the variable."""
    ascend = _is_ascend_var(var)
    shown = f"{var}={value!r}"
    text = value.strip()
    if hides_all_cards(value, var):
        raise ValueError(f"{shown} hides every card: unset it, or list the card indices to use (e.g. 0,1)")
    if ascend and re.search(r"\s", text):
        raise ValueError(f"{shown}: remove the spaces (the Ascend runtime stops reading at one)")
    entries = [e.strip() for e in text.split(",")]
    if len(entries) > 1 and not entries[-1]:
        entries.pop()  # a trailing comma: the runtimes ignore it
    for entry in entries:
        if not ascend and entry.upper().startswith(("GPU-", "MIG-")):
            raise ValueError(
                f"{shown} selects cards by UUID; the grid pins each worker by card index, so set "
                f"it to indices instead (nvidia-smi -L lists each GPU's index and UUID)")
        if not entry:
            raise ValueError(f"{shown} has an empty entry; list the card indices, e.g. 0,1")
        if not (entry.isascii() and entry.isdigit()):  # not a full-width ３
            hint = " (ranges are not understood: list each card, e.g. 0,1)" if "-" in entry else ""
            raise ValueError(f"{shown}: {entry!r} is not a card index{hint}")
    ids = [int(e) for e in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{shown} lists card {duplicates[0]} more than once; list each card once")
    return ids  # what the runtime reads too: every entry a number, no space on Ascend, none twice


def visible_devices_owner(var_name: str) -> str:
    return "npu" if _is_ascend_var(var_name) else "cuda"


def hides_all_cards(value: Optional[str], var_name: str) -> bool:
    """Empty, or ``-1`` for CUDA."""
    if value is None:
        return False
    text = value.strip()
    return not text or (not _is_ascend_var(var_name) and text == "-1")


def visible_card_ids(value: Optional[str], var_name: str) -> Optional[list[int]]:
    """Host card ids (as npu-smi / nvidia-smi number them) that ``value`` leaves visible; None
    when unset or selecting by GPU UUID (every listed card is judged)."""
    if value is None:
        return None
    if hides_all_cards(value, var_name):
        return []
    first = value.strip().split(",")[0].strip()
    if not _is_ascend_var(var_name) and first.upper().startswith(("GPU-", "MIG-")):
        return None
    return parse_visible_devices(value, var_name)


def check_visible_devices(value: Optional[str], var_name: str,
                          available: Optional[int] = None, kind: Optional[str] = None) -> Check:
    """``value`` None: unset. Strict only for the backend that reads it: for another ``kind``
    (a CI box hiding its GPUs with ``CUDA_VISIBLE_DEVICES=-1`` on cpu) at most WARN."""
    if kind and kind != visible_devices_owner(var_name):
        return _foreign_visible_devices(value, var_name, kind)
    return _judge_visible_devices(value, var_name, available)


def _foreign_visible_devices(value: Optional[str], var_name: str, kind: str) -> Check:
    name = "visible_devices"
    owner = visible_devices_owner(var_name)
    not_read = f"the {kind} backend does not read it"
    if value is None:
        return Check(name, "SKIP", f"{var_name} not set ({not_read})")
    if hides_all_cards(value, var_name):
        cards = "GPUs" if owner == "cuda" else "NPUs"
        if kind == "cpu":
            return Check(name, "PASS", f"{var_name}={value!r}: {cards} hidden, as wanted for the "
                                       f"cpu backend")
        return Check(name, "SKIP", f"{var_name}={value!r}: {cards} hidden ({not_read})")
    strict = _judge_visible_devices(value, var_name, None)
    if strict.verdict == "FAIL":
        return Check(name, "WARN", f"{strict.reason} ({not_read}; only {owner} processes are "
                                   f"affected)")
    return Check(name, "SKIP", f"{not_read}: {strict.reason}")


def _judge_visible_devices(value: Optional[str], var_name: str,
                           available: Optional[int]) -> Check:
    name = "visible_devices"
    if value is None:
        return Check(name, "SKIP", f"{var_name} not set: every card is visible")
    raw = value
    owner = visible_devices_owner(var_name)
    if not raw.strip():
        return Check(name, "FAIL", f"{var_name} is set but empty: no card will be visible to the "
                                   f"{owner} backend; unset it or list the cards (e.g. 0,1)")
    if hides_all_cards(raw, var_name):
        return Check(name, "FAIL", f"{var_name}={raw.strip()} hides every GPU: no card will be "
                                   f"visible to the {owner} backend; unset it or list the cards "
                                   f"(e.g. 0,1)")
    entries = [e.strip() for e in raw.strip().split(",")]
    fixed = ",".join(e for e in entries if e)
    seen = parse_visible_devices(raw, var_name)
    ascend = _is_ascend_var(var_name)
    if ascend and re.search(r"\s", raw.strip()):
        return Check(name, "FAIL", f"{var_name}={raw!r} contains a space: the Ascend runtime stops "
                                   f"reading there and sees only cards {seen}; write {fixed!r}")
    for position, entry in enumerate(entries):
        if not entry:
            if position == len(entries) - 1:
                continue  # trailing comma: harmless, reported below
            return Check(name, "FAIL", f"{var_name}={raw!r} has an empty entry: the runtime stops "
                                       f"there and sees only cards {seen}; write {fixed!r}")
        if not (entry.isascii() and entry.isdigit()) and not (not ascend and entry.upper().startswith(("GPU-", "MIG-"))):
            return Check(name, "FAIL", f"{var_name}={raw!r}: {entry!r} is not a card number; the "
                                       f"runtime stops there and sees only cards {seen}")
    numbers = [int(e) for e in entries if e.isascii() and e.isdigit()]
    duplicates = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicates:
        return Check(name, "FAIL", f"{var_name}={raw!r} lists card {duplicates[0]} twice "
                                   f"(CUDA then shows no card; Ascend rejects it)")
    if available is not None:
        missing = [n for n in numbers if n >= available]
        if missing:
            return Check(name, "FAIL", f"{var_name}={raw!r}: card {missing[0]} does not exist "
                                       f"(this host has {available}, numbered 0-{available - 1})")
    if not entries[-1]:
        return Check(name, "WARN", f"{var_name}={raw!r} ends with a comma; write {fixed!r}")
    if re.search(r"\s", raw.strip()):
        return Check(name, "WARN", f"{var_name}={raw!r} contains spaces; CUDA tolerates them, "
                                   f"Ascend does not: write {fixed!r}")
    if len(numbers) < len(entries):
        return Check(name, "PASS", f"{var_name}={raw}: selected by GPU UUID")
    return Check(name, "PASS", f"{var_name}={raw}: cards {seen} visible")
