"""Stage 03's judgement across hosts: node 0's merged grid holds every host's card rows
(``node`` and ``host`` columns) and one :class:`NodeEntry` per node of the job. The answers
are judged as across cards (the most common output hash of the finished cards is the
reference), over every card of every host; a host whose cards differ is named, and a node
that never reported makes the job's agreement unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from hyport_lib.utils.wording import counted


#: The note of a node node 0 stopped waiting for: the job was interrupted, not failed.
NOT_WAITED_FOR = "not reported when node 0 was stopped"


@dataclass
class NodeEntry:
    """One node of a multi-host job as node 0 saw it."""

    node_rank: int
    host: str = ""
    reported: bool = False
    cards: int = 0  # the cards its table holds (busy ones skipped included)
    ok: int = 0
    wall_s: Optional[float] = None
    table: str = ""  # its table's file on the shared folder
    note: str = ""  # why it counts against the job: never reported, another plan, different answers

    @property
    def label(self) -> str:
        return f"node {self.node_rank} (host {self.host})" if self.host else f"node {self.node_rank}"


@dataclass(frozen=True)
class HostAgreement:
    """``differing``: ``(node, card)`` of each finished card whose output differs from the
    reference; ``by_node``: those cards per node."""

    reference: Optional[str]
    finished: int
    differing: tuple[tuple[int, int], ...]

    @property
    def by_node(self) -> dict[int, list[int]]:
        nodes: dict[int, list[int]] = {}
        for node, card in self.differing:
            nodes.setdefault(node, []).append(card)
        return nodes


def _given(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def host_agreement(frame: pd.DataFrame) -> HostAgreement:
    """The finished cards of every host against the most common output hash (ties: the
    first in (node, card) order)."""
    ok = frame[frame["status"] == "ok"]
    ok = ok.assign(node=[int(n) if _given(n) else 0 for n in ok["node"]]).sort_values(["node", "card"])
    if ok.empty:
        return HostAgreement(None, 0, ())
    counts = ok["output_hash"].value_counts()
    reference = next(h for h in ok["output_hash"] if counts[h] == counts.max())
    differing = tuple((int(n), int(c)) for n, c, h in zip(ok["node"], ok["card"], ok["output_hash"])
                      if h != reference)
    return HostAgreement(reference, len(ok), differing)


def hosts_line(frame: pd.DataFrame, nodes: list[NodeEntry], *, sampling: bool) -> str:
    """The merged grid's agreement in words: every node that did not count first, then
    the hosts whose answers differ, or that every finished card of every host agreed."""
    said = [f"{entry.label}: {entry.note}." for entry in nodes if entry.note and not entry.reported]
    agreement = host_agreement(frame)
    hosts = counted(sum(1 for entry in nodes if entry.reported), "host")
    labels = {entry.node_rank: entry.label for entry in nodes}
    note = " (sampling is on, so differences may be legitimate)" if sampling else ""
    if agreement.reference is None:
        said.append(f"No card on any of the {hosts} finished, so there is nothing to compare.")
    elif agreement.differing:
        reference = agreement.reference[:12]
        for node, cards in sorted(agreement.by_node.items()):
            said.append(f"{labels.get(node, f'node {node}')} differs from the majority output (hash {reference}) "
                        f"on {counted(len(cards), 'card')} ({', '.join(map(str, cards))}){note}.")
        agreeing = agreement.finished - len(agreement.differing)
        said.append(f"{agreeing} of {counted(agreement.finished, 'finished card')} on {hosts} agree.")
    else:
        said.append(f"All {counted(agreement.finished, 'finished card')} on {hosts} produced identical outputs "
                    f"(hash {agreement.reference[:12]}){note}.")
    said += [f"{entry.label}: {entry.note}." for entry in nodes if entry.note and entry.reported]
    return " ".join(said)


def hosts_by_cards(nodes: list[NodeEntry]) -> str:
    """``2 hosts × 8 cards`` (every host the same count), else ``2 hosts, 12 cards``; the
    hosts that reported of the job's where one did not (``1 of 2 hosts × 8 cards``)."""
    reported = [entry.cards for entry in nodes if entry.reported]
    hosts = counted(len(nodes), "host")
    if len(reported) < len(nodes):
        hosts = f"{len(reported)} of {hosts}"
    if len(set(reported)) == 1:
        return f"{hosts} × {counted(reported[0], 'card')}"
    return f"{hosts}, {counted(sum(reported), 'card')}" if reported else hosts
