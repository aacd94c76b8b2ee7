"""A report run on several hosts (``-p nnodes=N -p node_rank=K`` with one ``--run-dir`` on
shared storage): node 0 owns the run folder (its index, drafts, ``report.html``, results);
node K > 0 writes its own part under ``<run>/nodes/node<K>/`` and runs only the stages that
declare ``node_rank`` (01, 03 and 04 of the notebooks; any other SKIPs there). What the pages
say of the nodes (hosts × cards, each node's folder) is read here from the nodes' own
``run.json`` and the stages' facts.
"""

from __future__ import annotations

import errno
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.nodes.inputs import read_node_settings

from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.wording import counted

#: The folder of a run that holds the other nodes' parts: ``<run>/nodes/node<K>/``.
NODES_DIR = "nodes"
#: The parameter a stage declares when it runs on every node (the others run on node 0).
NODE_RANK, NNODES, NODES_FROM = "node_rank", "nnodes", "nodes_from"
#: The most of a node's run.json node 0 reads (its stages' outcomes, a few KiB).
MAX_RUN_JSON_BYTES = 16 * 2**20


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
    if merged.get(NODES_FROM):
        # the stages settle their own parameters from it (each plan says where they came from);
        # the report needs only its place, read the same way (NodeInputError: one line)
        settings = read_node_settings(str(merged[NODES_FROM]), node_rank=rank)
        for name, given, said in ((NNODES, nnodes, settings.nnodes), (NODE_RANK, rank, settings.node_rank)):
            if given not in (said, 1 if name == NNODES else 0):
                raise ValueError(f"{name}={given} but {settings.origins.get(name, settings.source)} "
                                 f"(nodes_from={merged[NODES_FROM]!r}): they disagree; leave {name} out")
        nnodes, rank = settings.nnodes, settings.node_rank
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
        data, problem = (own, "") if rank == 0 and own is not None else _read_run(folder / "run.json", run_root)
        if data is None:
            nodes.append(NodeRun(rank, shown, problem=problem))
            continue
        stages = [s for s in data.get("stages") or [] if isinstance(s, dict)]
        nodes.append(NodeRun(rank, shown, True, str(data.get("host") or ""), str(data.get("status") or ""),
                             dict(Counter(str(s.get("verdict")) for s in stages))))
    return nodes


def _read_run(path: Path, run_root: Path) -> tuple[Optional[dict], str]:
    """A node's ``run.json``, read as every file of a shared folder is (a FIFO or a link out
    of the run folder is refused, never waited on), or why not."""
    try:
        data = json.loads(read_text(path, MAX_RUN_JSON_BYTES, folder=run_root, errors="strict"))
    except UnreadableFile as exc:
        if exc.errno == errno.ENOENT:
            return None, "no run.json yet (not started, or not on this storage)"
        return None, f"run.json unreadable ({exc.reason})"
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"run.json unreadable ({type(exc).__name__})"
    return (data, "") if isinstance(data, dict) else (None, "run.json holds no object")


@dataclass(frozen=True)
class RunShape:
    """Hosts × cards per host, each None where nothing recorded it; ``reported``: the hosts
    that reported where fewer than ``hosts`` did; ``all_cards``: every reported host's cards
    together, where their counts differ (``cards`` None then)."""

    hosts: Optional[int]
    cards: Optional[int]
    reported: Optional[int] = None
    all_cards: Optional[int] = None

    def line(self) -> str:
        """``2 hosts × 8 cards``, ``1 of 2 hosts × 8 cards``, ``2 hosts, 12 cards``, ``2 hosts``
        where no stage recorded its cards, ``8 cards`` on one host (never ``1 host × …``)."""
        if not self.hosts or self.hosts == 1:
            return counted(self.cards, "card") if self.cards else "cards not recorded"
        hosts = counted(self.hosts, "host")
        if self.reported is not None:
            hosts = f"{self.reported} of {hosts}"
        if self.cards:
            return f"{hosts} × {counted(self.cards, 'card')}"
        return f"{hosts}, {counted(self.all_cards, 'card')}" if self.all_cards is not None else hosts


def _count(value) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def run_shape(facts: dict, nnodes: int) -> RunShape:
    """Hosts from a stage's recorded ``hosts`` fact (its plan's nnodes), else the report's
    own ``nnodes``; cards per host from the cards of each host that reported
    (``host_cards``, stage 03's merged grid) where a stage recorded them, else from the
    stages' ``cards`` fact (node 0's: every host's where the hosts are alike)."""
    hosts = _count(facts.get("hosts")) or nnodes
    host_cards = facts.get("host_cards")
    if isinstance(host_cards, list) and host_cards and all(_count(c) is not None for c in host_cards):
        reported = len(host_cards) if len(host_cards) < hosts else None
        if len(set(host_cards)) == 1:
            return RunShape(hosts, host_cards[0] or None, reported)
        return RunShape(hosts, None, reported, sum(host_cards))
    cards = _count(facts.get("cards"))
    return RunShape(hosts, cards or None)
