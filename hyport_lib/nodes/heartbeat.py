"""Each node's launcher and the job's rendezvous store: a thread (:class:`NodeLink`) that
publishes the node's card and a heartbeat every few seconds, and reads what the other nodes
published (cards, heartbeats, the ranks their workers run, their exits; node 0's verdict). The
launcher reads only :meth:`NodeLink.snapshot`, never the store: a store that hangs or vanishes
never stalls its watch.

Node 0's launcher hosts the store (:func:`host_store`) on ``master_addr:master_port``, the
endpoint of torchrun's c10d rendezvous, whose agents all join it as clients (``is_host=false``):
the store outlives node 0's torchrun, so a node that died can still be told from a rank that
failed. Node 0 measures each node's silence on its own clock (the heartbeat is a counter, never a
time: the hosts' clocks may differ).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Optional

from hyport_lib.nodes.handshake import NodeCard, Verdict
from hyport_lib.utils.typed_records import from_mapping, to_mapping

#: Every key hyport writes in the rendezvous store starts with this and the job's rdzv_id
#: (torch's own keys start with ``torch.rendezvous.``).
KEY_PREFIX = "hyport"
#: The one key outside the job's prefix: each node's rdzv_id and host, so that a node that
#: reached the store with another rdzv_id is named (it would otherwise never be seen).
HELLO_PREFIX = "hyport-hello/"
#: A store operation of the link waits at most this long (the launcher never waits on it).
STORE_OP_S = 5.0


def job_prefix(rdzv_id: str) -> str:
    return f"{KEY_PREFIX}/{rdzv_id}/"


def heartbeat_interval(node_timeout_s: float) -> float:
    """Seconds between two heartbeats: a quarter of the silence that names a node, 5 s at most."""
    return max(0.5, min(5.0, node_timeout_s / 4))


def host_store(port: int, timeout_s: float):
    """Node 0: the rendezvous store (a ``TCPStore`` server on every interface, ``port``)."""
    import torch.distributed as dist

    return dist.TCPStore("0.0.0.0", port, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=timeout_s))


def client_store(addr: str, port: int, rdzv_id: str, connect_s: float, op_s: float = STORE_OP_S):
    """A client of node 0's store under the job's prefix: connecting retries for ``connect_s``
    (RuntimeError / TimeoutError after), each later operation waits at most ``op_s``."""
    import torch.distributed as dist

    store = dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=max(connect_s, 1.0)))
    store.set_timeout(timedelta(seconds=op_s))
    return dist.PrefixStore(job_prefix(rdzv_id), store)


@dataclass
class RankCard:
    """What each worker publishes: its global rank, on which node and host."""

    rank: int = 0
    local_rank: int = 0
    node_rank: int = 0
    group_rank: int = 0  # torchrun's order of the nodes (c10d sorts them by host name and pid)
    host: str = ""


@dataclass
class NodeExit:
    """How one node's launch ended (its launcher publishes it and writes it beside the logs)."""

    node_rank: int = 0
    host: str = ""
    status: str = ""  # ok | failed | timeout | interrupted | refused
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    log_path: str = ""
    wall_s: float = 0.0
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    token: str = ""  # node 0's token of this job: an exit file of an earlier job is not this one's


@dataclass
class Hello:
    """What a node says outside the job's prefix: who it is and which rendezvous it joins."""

    node_rank: int = 0
    host: str = ""
    rdzv_id: str = ""


@dataclass
class LinkState:
    """What the link knows now (a copy: the launcher reads it between polls)."""

    connected: bool = False
    cards: dict[int, NodeCard] = field(default_factory=dict)
    verdict: Optional[Verdict] = None
    #: node -> seconds since its heartbeat last changed (node 0's clock; nodes that exited left out)
    silent_s: dict[int, float] = field(default_factory=dict)
    ranks: dict[int, RankCard] = field(default_factory=dict)
    exits: dict[int, NodeExit] = field(default_factory=dict)
    #: "" while the store answers; else why it does not (a node > 0 names node 0 with it)
    store_error: str = ""
    store_silent_s: float = 0.0
    #: node -> its hello, for a node that reached the store with another rdzv_id
    strangers: dict[int, Hello] = field(default_factory=dict)
    #: node -> the card of a second launcher given the same node_rank
    twice: dict[int, NodeCard] = field(default_factory=dict)


def publish_rank(store, card: RankCard) -> None:
    store.set(f"rank/{card.rank}", json.dumps(to_mapping(card)))


def wait_verdict(store, timeout_s: float) -> Verdict:
    """A worker waits for node 0's verdict (TimeoutError / RuntimeError past ``timeout_s``)."""
    store.set_timeout(timedelta(seconds=max(timeout_s, 1.0)))
    store.wait(["verdict"], timedelta(seconds=max(timeout_s, 1.0)))
    return Verdict.from_json(store.get("verdict"))


class NodeLink(threading.Thread):
    """This node's side of the store, in a daemon thread. ``connect()`` gives the store (node 0:
    the one it hosts, under the job's prefix). Node 0 also judges: once every node's card is in
    (or a node_rank is given twice), ``judge(cards, twice)`` gives the verdict it publishes."""

    def __init__(self, connect: Callable[[], object], card: NodeCard, nnodes: int, world_size: int,
                 beat_s: float, judge: Optional[Callable[[dict[int, NodeCard], dict[int, NodeCard]], Verdict]] = None,
                 rdzv_id: str = ""):
        super().__init__(name=f"hyport node {card.node_rank} link", daemon=True)
        self._connect = connect
        self.card = card
        self.nnodes = nnodes
        self.world_size = world_size
        self.beat_s = beat_s
        self.judge = judge
        self.rdzv_id = rdzv_id
        self._state = LinkState()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._exit: Optional[NodeExit] = None
        self._exit_sent = threading.Event()
        self._beats: dict[int, tuple[bytes, float]] = {}  # node -> (counter, when it changed)
        self._last_answer = time.monotonic()

    # ---- read by the launcher
    def snapshot(self) -> LinkState:
        with self._lock:
            state = self._state
            now = time.monotonic()
            silent = {k: now - when for k, (_, when) in self._beats.items()
                      if k != self.card.node_rank and k not in state.exits}
            return LinkState(state.connected, dict(state.cards), state.verdict, silent, dict(state.ranks),
                             dict(state.exits), state.store_error,
                             now - self._last_answer if state.store_error else 0.0, dict(state.strangers),
                             dict(state.twice))

    def send_exit(self, report: NodeExit, wait_s: float) -> bool:
        """Publish this node's exit (the next tick; a later one replaces it); True once it is in
        the store."""
        self._exit = report
        self._exit_sent.clear()
        return self._exit_sent.wait(wait_s)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=STORE_OP_S * 2)

    # ---- the thread
    def run(self) -> None:
        try:
            store = self._connect()
        except Exception as exc:  # noqa: BLE001 — any failure to reach the store is the finding
            self._set(store_error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        self._last_answer = time.monotonic()
        counter, next_beat = 0, 0.0
        while not self._stopping.is_set():
            try:
                if not self._state.connected:
                    # The first card of a node_rank holds it: a second one (another launcher given
                    # the same node_rank) is left beside it for node 0 to refuse.
                    mine = self.card.to_json()
                    if store.compare_set(f"card/{self.card.node_rank}", "", mine) != mine.encode():
                        store.set(f"twice/{self.card.node_rank}", mine)
                    hello = Hello(self.card.node_rank, self.card.host, self.rdzv_id)
                    store.underlying_store.set(f"{HELLO_PREFIX}{self.card.node_rank}", json.dumps(to_mapping(hello)))
                    self._set(connected=True)
                if time.monotonic() >= next_beat:
                    counter += 1
                    store.set(f"beat/{self.card.node_rank}", str(counter))
                    next_beat = time.monotonic() + self.beat_s
                self._read(store)
                if self._exit is not None and not self._exit_sent.is_set():
                    store.set(f"exit/{self.card.node_rank}", json.dumps(to_mapping(self._exit)))
                    self._exit_sent.set()
                self._last_answer = time.monotonic()
                self._set(store_error="")
            except Exception as exc:  # noqa: BLE001 — the store gone or frozen: said, then retried
                self._set(store_error=f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
            self._stopping.wait(min(1.0, self.beat_s))

    def _read(self, store) -> None:
        nodes = range(self.nnodes)
        # A second card of a node_rank is read before the cards: the first is in by then.
        twice = dict(self._state.twice)
        for k in nodes:
            if k not in twice and store.check([f"twice/{k}"]):
                twice[k] = NodeCard.from_json(store.get(f"twice/{k}"))
        cards, strangers = dict(self._state.cards), dict(self._state.strangers)
        for k in nodes:
            if k not in cards and store.check([f"card/{k}"]):
                cards[k] = NodeCard.from_json(store.get(f"card/{k}"))
                self._beats.setdefault(k, (b"", time.monotonic()))
                strangers.pop(k, None)
            elif k not in cards and store.underlying_store.check([f"{HELLO_PREFIX}{k}"]):
                hello = from_mapping(Hello, json.loads(store.underlying_store.get(f"{HELLO_PREFIX}{k}")))
                if hello.rdzv_id != self.rdzv_id:
                    strangers[k] = hello
        verdict = self._state.verdict
        if verdict is None and self.judge is not None and (len(cards) == self.nnodes or twice):
            verdict = self.judge(cards, twice)
            store.set("verdict", verdict.to_json())
        elif verdict is None and store.check(["verdict"]):
            verdict = Verdict.from_json(store.get("verdict"))
        now = time.monotonic()
        for k in cards:
            if store.check([f"beat/{k}"]):
                value = store.get(f"beat/{k}")
                if self._beats.get(k, (None,))[0] != value:
                    self._beats[k] = (value, now)
        ranks = dict(self._state.ranks)
        for rank in range(self.world_size):
            if rank not in ranks and store.check([f"rank/{rank}"]):
                ranks[rank] = from_mapping(RankCard, json.loads(store.get(f"rank/{rank}")))
        exits = dict(self._state.exits)
        for k in cards:
            if k not in exits and store.check([f"exit/{k}"]):
                exits[k] = from_mapping(NodeExit, json.loads(store.get(f"exit/{k}")))
        self._set(cards=cards, verdict=verdict, ranks=ranks, exits=exits, strangers=strangers, twice=twice)

    def _set(self, **changes) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(self._state, key, value)
