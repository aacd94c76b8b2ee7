"""Which ``/dev/davinciN`` nodes a container needs: read from the Ascend Docker Runtime's
variables, the npu-smi listing, ``num_cards`` and the card nodes present.

The variables, as the runtime reads them (MindCluster "Ascend Docker Runtime" user guide,
table "Ascend Docker Runtime parameters", hiascend.com mindcluster ``dlruntime_ug_006``;
and the runtime's own parser, ``component/ascend-docker-runtime/runtime/process/process.go``
in github.com/Ascend/mind-cluster, see ``docs/containers.md``):

* ``ASCEND_VISIBLE_DEVICES``: card numbers and ranges (``0-3,6``; a range ends at 128 at
  most, its left end is not above its right), or chip names ``AscendXXX-Y`` (XXX one of
  910 / 310 / 310B / 310P, all the same, Y the card; names and numbers do not mix). The
  runtime mounts them sorted, each once. ``void`` or an empty value: the runtime mounts
  no NPU at all.
* ``ASCEND_RUNTIME_OPTIONS`` holding ``VIRTUAL``: the numbers are vNPUs; the runtime
  mounts the host's ``/dev/vdavinciN`` as ``/dev/davinciN`` in the container.
* ``ASCEND_VNPU_SPECS`` (``vir04``): the runtime cuts a vNPU from the named card and mounts
  it under the ID it creates, which no variable names.
* ``ASCEND_RT_VISIBLE_DEVICES``: positions among the cards the process sees.

Without a variable or a listing, a container's cards are the nodes present: ``docker run
--device=/dev/davinci4`` gives a one-card container whose card is 4, not 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hyport_lib.devices.visible_devices import parse_visible_devices

#: The highest right end of a range the Ascend Docker Runtime accepts (``maxDevice``).
MAX_RANGE_END = 128
#: ``AscendXXX-Y`` as the runtime matches it.
CHIP_NAME = re.compile(r"^Ascend(910|310|310B|310P)-(\d+)$")
#: Values of ASCEND_VISIBLE_DEVICES with which the runtime mounts no NPU.
NO_NPU_VALUES = ("", "void")


@dataclass
class CardNeed:
    """The card nodes (``N`` of each ``/dev/davinciN``) the next stages need in the
    container, and where those numbers came from.

    Attributes:
        short: further card nodes needed whose numbers nothing names (``num_cards`` above
            the cards present): any free card of the host will do.
        no_npu: set when ASCEND_VISIBLE_DEVICES asks the runtime to mount no NPU (the reason).
        problem: why ASCEND_VISIBLE_DEVICES could not be read (it was then ignored).
    """

    cards: list[int]
    source: str
    short: int = 0
    virtual: bool = False
    no_npu: Optional[str] = None
    problem: Optional[str] = None


def _card_range(entry: str, value: str) -> range:
    low, _, high = (part.strip() for part in entry.partition("-"))
    if not (low.isdigit() and high.isdigit()):
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a card number "
                         f"or a range like 0-3")
    first, last = int(low), int(high)
    if last > MAX_RANGE_END:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: range {entry!r} ends above "
                         f"{MAX_RANGE_END}, which the Ascend Docker Runtime refuses")
    if first > last:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: range {entry!r} runs backwards "
                         f"(write {last}-{first})")
    return range(first, last + 1)


def _chip_names(entries: list[str], value: str) -> list[int]:
    cards, chips = [], set()
    for entry in entries:
        match = CHIP_NAME.match(entry)
        if not match:
            raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a chip name "
                             f"like Ascend910-1 (names and numbers do not mix)")
        chips.add(match.group(1))
        cards.append(int(match.group(2)))
    if len(chips) > 1:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: names chips of {len(chips)} types "
                         f"({', '.join(sorted('Ascend' + c for c in chips))}); the runtime "
                         f"takes one type")
    return cards


def parse_card_list(value: str) -> list[int]:
    """ASCEND_VISIBLE_DEVICES as the runtime reads it: ``0-3,6`` or ``Ascend910-0,Ascend910-1``
    -> the card numbers, sorted, each once.

    Raises:
        ValueError: naming the entry the runtime would refuse.
    """
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if "Ascend" in value:
        return sorted(set(_chip_names(entries, value)))
    cards: set[int] = set()
    for entry in entries:
        if "-" in entry:
            cards.update(_card_range(entry, value))
        elif entry.isdigit():
            cards.add(int(entry))
        else:
            raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a card number "
                             f"or a range like 0-3")
    return sorted(cards)


def _first_free(taken: Sequence[int], count: int) -> list[int]:
    """The ``count`` lowest card numbers not in ``taken`` (the nodes suggested for a shortfall)."""
    free, taken_set, number = [], set(taken), 0
    while len(free) < count:
        if number not in taken_set:
            free.append(number)
        number += 1
    return free


def suggested_cards(need: CardNeed, present: Sequence[int]) -> list[int]:
    """Card numbers to name in the fix for ``need.short`` (the lowest ones not yet there)."""
    return _first_free(list(present) + need.cards, need.short)


def needed_cards(num_cards: Optional[int], environ: Mapping[str, str],
                 listed: Optional[list[int]] = None,
                 present: Optional[list[int]] = None) -> CardNeed:
    """The card nodes the next stages' cards need, and where they came from.

    The cards seen are ASCEND_VISIBLE_DEVICES's (the runtime mounts those numbers), else the
    listing's, else the nodes present; ASCEND_RT_VISIBLE_DEVICES picks positions among them;
    ``num_cards`` keeps the first ones, and asks for more than are seen as ``short``.
    Without ``listed`` (npu-smi's card numbers) and ``present`` (the card nodes in the
    container), ``0..num_cards-1`` and positions stand for the numbers, as on a bare host.
    """
    virtual = "VIRTUAL" in environ.get("ASCEND_RUNTIME_OPTIONS", "").upper()
    host_cards, notes, problem, no_npu = None, [], None, None
    host_var = environ.get("ASCEND_VISIBLE_DEVICES")
    if host_var is not None:
        text = host_var.strip()
        if text.lower() in NO_NPU_VALUES:
            no_npu = (f"ASCEND_VISIBLE_DEVICES={host_var!r} asks the Ascend Docker Runtime to "
                      f"mount no NPU")
            notes.append(f"{no_npu}; the card nodes added by hand are judged")
        elif environ.get("ASCEND_VNPU_SPECS", "").strip():
            notes.append(f"ASCEND_VNPU_SPECS={environ['ASCEND_VNPU_SPECS'].strip()}: a vNPU cut "
                         f"from card {text}, mounted under the ID the runtime created")
        else:
            try:
                host_cards = parse_card_list(text)
            except ValueError as exc:
                problem = str(exc)
                notes.append(f"{problem} (ignored)")
    if host_cards is not None:
        seen, seen_from = host_cards, f"ASCEND_VISIBLE_DEVICES={host_var.strip()}"
    elif listed is not None:
        seen, seen_from = list(listed), "the cards npu-smi lists"
    elif present is not None:
        seen, seen_from = list(present), "the card nodes present"
    else:
        seen, seen_from = None, ""
    if no_npu and not seen:
        return CardNeed([], no_npu, virtual=virtual, no_npu=no_npu)
    short = 0
    runtime_var = environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if runtime_var is not None and runtime_var.strip():
        # positions among the cards seen; a position past them names a card not mounted
        positions = parse_visible_devices(runtime_var, "ASCEND_RT_VISIBLE_DEVICES")
        source = f"ASCEND_RT_VISIBLE_DEVICES={runtime_var}"
        if seen is None:
            cards, source = positions, source + " (no listing: positions taken as card numbers)"
        else:
            cards = [seen[p] for p in positions if p < len(seen)]
            short, source = len(positions) - len(cards), f"{source} within {seen_from}"
    elif seen is not None:
        cards, source = list(seen), seen_from
        if num_cards and len(cards) < num_cards:
            short, source = num_cards - len(cards), f"num_cards={num_cards}, {len(cards)} in {source}"
        elif not num_cards and not cards:
            short, source = 1, f"{source}: no card count known, at least one card node needed"
    elif num_cards:
        cards, source = list(range(num_cards)), f"num_cards={num_cards}"
    else:
        cards, source = [], "no card count known"
    if num_cards and len(cards) > num_cards:
        cards, source = cards[:num_cards], f"the first {num_cards} of {source}"
    source = "; ".join(notes + [source])
    return CardNeed(cards, source, short, virtual, no_npu, problem)
