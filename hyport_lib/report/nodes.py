"""A report run on several hosts (``-p nnodes=N -p node_rank=K`` with one ``--run-dir`` on
shared storage): node 0 owns the run folder (its index, drafts, ``report.html``, results);
node K > 0 writes its own part under ``<run>/nodes/node<K>/`` and runs only the stages that
take ``node_rank``. What the pages say of the nodes (hosts × cards, each node's folder) is
read here from the nodes' own ``run.json`` and the stages' facts.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

#: The folder of a run that holds the other nodes' parts: ``<run>/nodes/node<K>/``.
NODES_DIR = "nodes"
#: The parameter a stage declares when it runs on every node (the others run on node 0).
NODE_RANK, NNODES = "node_rank", "nnodes"


def node_folder(run_root: Path, rank: int) -> Path:
    """Where node ``rank`` writes its part of the run (node 0: the run folder itself)."""
    return Path(run_root) if rank == 0 else Path(run_root) / NODES_DIR / f"node{rank}"


@dataclass(frozen=True)
class NodePlace:
    """This report's place in the job: ``nnodes`` hosts, this one ``node_rank``."""

    nnodes: int = 1
    node_rank: int = 0

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1


def node_place(merged: dict, *, run_dir_given: bool) -> NodePlace:
    """The node parameters of the run (declared by the stages that run on every node, given
    with ``-p`` or the profile); a ValueError naming the value when they cannot place this
    report: a rank out of range, or several nodes without one ``--run-dir``."""
    nnodes, rank = merged.get(NNODES, 1), merged.get(NODE_RANK, 0)
    nnodes = 1 if nnodes is None else int(nnodes)
    rank = 0 if rank is None else int(rank)
    if nnodes < 1:
        raise ValueError(f"nnodes={nnodes}: expected 1 or more hosts")
    if not 0 <= rank < nnodes:
        raise ValueError(f"node_rank={rank}: must be 0 .. nnodes-1 (nnodes={nnodes})")
    if nnodes > 1 and not run_dir_given:
        raise ValueError(f"nnodes={nnodes}: a report on several hosts needs --run-dir PATH, the same folder on "
                         "shared storage for every node (each node's report would otherwise write its own "
                         "run folder)")
    return NodePlace(nnodes, rank)


def runs_on_every_node(declared: dict) -> bool:
    """A stage that declares ``node_rank`` runs on every node; any other runs on node 0."""
    return NODE_RANK in declared


def skipped_here(place: NodePlace) -> str:
    """What a node > 0 records for a stage that runs on node 0 only."""
    return (f"runs on node 0: node {place.node_rank} of {place.nnodes} runs only the stages that take "
            f"{NODE_RANK}")


@dataclass
class NodeRun:
    """One node's part of the run as node 0's pages list it: ``found`` False while that node
    has written no ``run.json`` (not started, or its storage is not this one)."""

    rank: int
    folder: str  # relative to the run folder ("." for node 0)
    found: bool = False
    host: str = ""
    status: str = ""
    verdicts: dict = field(default_factory=dict)  # verdict -> stages
    problem: str = ""

    @property
    def shown_folder(self) -> str:
        """As the pages name it: ``<run>``, ``<run>/nodes/node1``."""
        return "<run>" if self.folder == "." else f"<run>/{self.folder}"

    @property
    def index(self) -> str:
        return "index.html" if self.folder == "." else f"{self.folder}/index.html"


def read_node_runs(run_root: Path, nnodes: int, own: Optional[dict] = None) -> list[NodeRun]:
    """Every node of the run, node 0 first, from its ``run.json`` (``own``: node 0's, as the
    runner holds it now)."""
    nodes = []
    for rank in range(nnodes):
        folder = node_folder(run_root, rank)
        shown = "." if rank == 0 else folder.relative_to(run_root).as_posix()
        data, problem = (own, "") if rank == 0 and own is not None else _read_run(folder / "run.json")
        if data is None:
            nodes.append(NodeRun(rank, shown, problem=problem))
            continue
        stages = [s for s in data.get("stages") or [] if isinstance(s, dict)]
        nodes.append(NodeRun(rank, shown, True, str(data.get("host") or ""), str(data.get("status") or ""),
                             dict(Counter(str(s.get("verdict")) for s in stages))))
    return nodes


def _read_run(path: Path) -> tuple[Optional[dict], str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no run.json yet (not started, or not on this storage)"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"run.json unreadable ({type(exc).__name__})"
    return (data, "") if isinstance(data, dict) else (None, "run.json holds no object")


@dataclass(frozen=True)
class RunShape:
    """Hosts × cards per host, each None where nothing recorded it."""

    hosts: Optional[int]
    cards: Optional[int]

    def line(self) -> str:
        """``2 hosts × 8 cards``, ``2 hosts`` where no stage recorded its cards, ``8 cards``
        on one host (never ``1 host × …``)."""
        cards = f"{self.cards} card{'s' if self.cards != 1 else ''}" if self.cards else ""
        if not self.hosts or self.hosts == 1:
            return cards or "cards not recorded"
        return f"{self.hosts} hosts × {cards}" if cards else f"{self.hosts} hosts"


def run_shape(facts: dict, nnodes: int) -> RunShape:
    """Hosts from a stage's recorded ``hosts`` fact (its plan's nnodes), else the report's
    own ``nnodes``; cards per host from the stages' ``cards`` fact."""
    hosts, cards = facts.get("hosts"), facts.get("cards")
    hosts = hosts if isinstance(hosts, int) and not isinstance(hosts, bool) and hosts > 0 else nnodes
    return RunShape(hosts, cards if isinstance(cards, int) and not isinstance(cards, bool) else None)
