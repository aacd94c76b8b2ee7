"""Stage 04 on several nodes (``nnodes > 1``): torchrun's c10d rendezvous flags, this node's card
for the handshake (:mod:`hyport_lib.nodes.handshake`), and the launcher's watch of the other nodes
through its :class:`~hyport_lib.nodes.heartbeat.NodeLink`: a node that never joins, a refusal, a
node gone silent stop this node's torchrun with a reason naming the node (:class:`NodeStop`).

Node 0's launcher hosts the rendezvous store and writes the job's one record, with a row per node
(:class:`NodeRow`); every node leaves its exit in ``output_dir/nodes/node<k>.json`` and in the store.
"""

from __future__ import annotations

import json
import math
import socket
import time
from pathlib import Path
from typing import Optional

from hyport_lib.nodes.handshake import NodeCard, Verdict, file_digest, folder_digests, plan_hash, verdict
from hyport_lib.nodes.shared_folder import read_token, write_token
from hyport_lib.nodes.heartbeat import (NodeExit, NodeLink, client_store, heartbeat_interval, host_store, job_prefix,
                                        STORE_OP_S)
from hyport_lib.nodes.start_command import start_command
from hyport_lib.nodes.versions import differences, versions_fingerprint
from hyport_lib.params import parameter_fields
from hyport_lib.train.output_dir import NODES_FOLDER, read_json_object
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import NodeRow
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.typed_records import from_mapping, to_mapping
from hyport_lib.utils.wording import counted

#: Past join_timeout_s, a torchrun that has not given up by itself is stopped by its launcher.
JOIN_GRACE_S = 15.0
#: How long node 0 waits, once its torchrun ended, for the other nodes' exits.
EXIT_WAIT_S = 30.0
#: Parameters never compared as typed. node_rank: each node's own; resume_from: node 0 resolves
#: the resume point once and sends it; nodes_from: node 0's start lines write out what it set;
#: master_addr: a name on one node, an address on another; a path (model_path, dataset_path,
#: image_root, deepspeed_config, output_dir): each host's own spelling or mount, compared by what
#: the plan resolved from it (the files' digests, the DeepSpeed JSON, node 0's token).
OWN_PARAMETERS = tuple(dict.fromkeys(("node_rank", "resume_from", "nodes_from", "master_addr",
                                     *(f.name for f in parameter_fields(Params) if f.spec.path))))


class NodeStop(Exception):
    """Stop this node's torchrun: ``reason`` names the node; ``status`` is the result's."""

    def __init__(self, reason: str, status: str = "failed"):
        super().__init__(reason)
        self.reason = reason
        self.status = status


def rendezvous_flags(plan: LaunchPlan) -> list[str]:
    """torchrun's c10d rendezvous on node 0's store: every agent a client of it (``is_host=false``:
    node 0's launcher hosts it), ``join_timeout`` the user's; a store read waits as long."""
    p = plan.params
    join = int(math.ceil(p.join_timeout_s))
    return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{plan.master_addr}:{plan.master_port}",
            "--rdzv-id", plan.rdzv_id,
            "--rdzv-conf", f"join_timeout={join},read_timeout={max(join, 60)},is_host=false"]


#: What to do about a node that reached the store with another rdzv_id (hyport derives it from
#: run_name and master_port when none is given).
STRANGER_HINT = (" (give every node the same rdzv_id, or none and the same run_name and master_port: "
                 "the id is derived from them)")


def compared_parameters(params: Params) -> dict:
    """The parameters every node must be given alike (:data:`OWN_PARAMETERS` left out)."""
    return {k: v for k, v in params.to_dict().items() if k not in OWN_PARAMETERS}


def node_card(plan: LaunchPlan, token: Optional[str]) -> NodeCard:
    """This node's card: the plan's compared values, the digests of its input files (by their
    role, not their path: each host may keep them elsewhere), its versions and the token it
    found in its output_dir (node 0: the one it wrote)."""
    values = compared_parameters(plan.params)
    values.update({"world size": plan.world_size, "processes per node": plan.nproc_per_node,
                   "device kind": plan.device_kind, "precision (resolved)": plan.precision,
                   "attention (resolved)": plan.attn_implementation,
                   # the images are not digested (a dataset may name thousands): whether each node
                   # reads them from its own image_root or beside the data file is compared
                   "image_root given": plan.params.image_root is not None,
                   "DeepSpeed config (resolved)": json.dumps(plan.deepspeed_json, sort_keys=True)})
    files = {}
    if not plan.bundled_dataset:
        files["dataset_path"] = file_digest(plan.dataset_path)
        data_file = plan.dataset.get("path")
        if data_file and Path(data_file).is_file() and Path(data_file) != Path(plan.dataset_path):
            files["dataset's data file"] = file_digest(data_file)
    files.update(folder_digests(plan.model_path, "model file"))
    return NodeCard(node_rank=plan.params.node_rank, host=socket.gethostname(), output_dir=plan.output_dir,
                    plan=values, files=files, versions=versions_fingerprint(), token=token or "",
                    plan_hash=plan_hash(values, files))


class JobNodes:
    """This node's part of a multi-node launch (created only when ``nnodes > 1``)."""

    def __init__(self, plan: LaunchPlan):
        self.plan = plan
        self.params = plan.params
        self.node_rank = plan.params.node_rank
        self.store = None  # node 0: the store it hosts
        self.link: Optional[NodeLink] = None
        self.card: Optional[NodeCard] = None
        self.started = time.monotonic()

    # ---- before torchrun
    def start(self) -> None:
        p, plan = self.params, self.plan
        beat = heartbeat_interval(p.node_timeout_s)
        if self.node_rank == 0:
            token = write_token(plan.output_dir)  # before node 0's card: the others look for it
            self.card = node_card(plan, token)
            self.store = self._host_store()
            connect, judge = self._own_store, self._judge
        else:
            self.card = node_card(plan, None)  # its token is read once node 0's store answers
            connect, judge = self._node0_store, None
        self.link = NodeLink(connect, self.card, p.nnodes, plan.world_size, beat, judge=judge, rdzv_id=plan.rdzv_id)
        self.started = time.monotonic()
        self.link.start()

    def _host_store(self):
        """Node 0's store, or a :class:`NodeStop` in one line (the plan checked the port; another
        process may have taken it since)."""
        port = self.plan.master_port
        try:
            return host_store(port, STORE_OP_S)
        except Exception as exc:  # noqa: BLE001 — torch's DistNetworkError carries a C++ trace
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            if "in use" in str(exc).lower():
                raise NodeStop(f"master_port={port} is already taken on this host (node 0's rendezvous store "
                               f"cannot listen on it: {first}); choose another port") from None
            raise NodeStop(f"master_port={port}: node 0's rendezvous store cannot listen on it ({first})") from None

    def _own_store(self):
        import torch.distributed as dist

        return dist.PrefixStore(job_prefix(self.plan.rdzv_id), self.store)

    def _node0_store(self):
        store = client_store(self.plan.master_addr, self.plan.master_port, self.plan.rdzv_id,
                             connect_s=self.params.join_timeout_s)
        # Read only now: node 0 writes its token before its store answers.
        self.card.token = read_token(self.plan.output_dir) or ""
        return store

    def _judge(self, cards: dict[int, NodeCard], twice: dict[int, NodeCard]) -> Verdict:
        return verdict(self.card, cards.values(), self.params.storage, self.plan.resume_checkpoint, twice)

    # ---- the watch (the launcher's on_tick, twice a second)
    def waiting_for(self) -> list[int]:
        """The nodes not heard of yet (a node > 0 waits for node 0's card in its store)."""
        state = self.link.snapshot()
        if self.node_rank != 0:
            return [] if 0 in state.cards else [0]
        return [k for k in range(1, self.params.nnodes) if k not in state.cards]

    def check(self) -> None:
        """Raise :class:`NodeStop` when this node's torchrun must stop now."""
        p, state = self.params, self.link.snapshot()
        if state.verdict is not None and not state.verdict.accepted:
            refused = state.verdict.refused_node == self.node_rank
            raise NodeStop(state.verdict.refusal, "refused" if refused else "failed")
        elapsed = time.monotonic() - self.started
        if self.waiting_for() and elapsed > p.join_timeout_s + JOIN_GRACE_S:
            raise NodeStop(self.join_reason())
        if self.node_rank == 0:
            lost = self._silent(state, p.node_timeout_s)
            if lost:
                raise NodeStop(lost)
        elif self._node0_ended(state):
            raise NodeStop(self._node0_ended(state))
        elif state.store_error and state.store_silent_s > p.node_timeout_s:
            raise NodeStop(self._node0_lost(state))

    def join_reason(self) -> str:
        p, state = self.params, self.link.snapshot()
        if self.node_rank != 0:
            if 0 in state.strangers:
                return self._stranger(state.strangers[0]) + STRANGER_HINT
            return (f"node 0's rendezvous store at {self.plan.master_addr}:{self.plan.master_port} did not answer "
                    f"within join_timeout_s={p.join_timeout_s:g}: start node 0 first"
                    + (f" ({state.store_error})" if state.store_error else ""))
        missing = [k for k in range(1, p.nnodes) if k not in state.cards]
        strangers = [self._stranger(state.strangers[k]) for k in missing if k in state.strangers]
        if strangers:
            return (f"{p.nnodes - len(missing)} of {p.nnodes} nodes joined within join_timeout_s="
                    f"{p.join_timeout_s:g}: {'; '.join(strangers)}{STRANGER_HINT}")
        starts = "; ".join(f"start node_rank {k} with: {start_command(p, k)}" for k in missing)
        never = (f"node {missing[0]} never arrived" if len(missing) == 1
                 else f"nodes {', '.join(map(str, missing))} never arrived")
        return (f"{p.nnodes - len(missing)} of {p.nnodes} nodes joined within join_timeout_s="
                f"{p.join_timeout_s:g}: {never}; {starts}")

    def _stranger(self, hello) -> str:
        return f"node {hello.node_rank} (host {hello.host}) joined with rdzv_id={hello.rdzv_id}, not {self.plan.rdzv_id}"

    def _node0_ended(self, state, by_node_only: bool = False) -> str:
        """A node > 0: node 0's published exit, when it did not end ok. ``by_node_only``: only
        when node 0 ended for a reason of the job's nodes (a refusal, a lost or missing node, a
        stop), not when its own ranks failed: those usually echo this node's own first failure,
        which this node's logs then name."""
        ended = state.exits.get(0)
        if ended is None or ended.status == "ok":
            return ""
        if by_node_only and ended.status == "failed" and (ended.reason or "").startswith("torchrun:"):
            return ""
        return f"node 0 (host {ended.host}) ended {ended.status}" + (f": {ended.reason}" if ended.reason else "")

    def _silent(self, state, limit: float) -> str:
        for k, silent in sorted(state.silent_s.items()):
            if silent > limit:
                card = state.cards.get(k)
                ranks = sorted(r for r, c in state.ranks.items() if c.node_rank == k)
                said = f", {_ranks(ranks)}" if ranks else ""
                return (f"node {k} (host {card.host if card else '?'}{said}) stopped answering {silent:.0f} s ago "
                        f"(node_timeout_s={self.params.node_timeout_s:g})")
        return ""

    def _node0_lost(self, state) -> str:
        host = state.cards[0].host if 0 in state.cards else self.plan.master_addr
        return (f"node 0 (host {host}) stopped answering {state.store_silent_s:.0f} s ago (node_timeout_s="
                f"{self.params.node_timeout_s:g}): its rendezvous store gives {state.store_error}")

    # ---- after torchrun
    def failure_reason(self, own: NodeExit) -> Optional[str]:
        """Why the job failed, by node, when a node says it better than the ranks' logs: a node
        that never joined, node 0's refusal, a node gone silent (node 0 waits for every other
        node's exit or silence: a killed node's peers fail first, with "Connection closed"); on
        a node > 0, node 0's end (this node's ``own`` exit is published first: node 0 waits for it)."""
        state = self.link.snapshot()
        if self.waiting_for():
            return self.join_reason()
        if state.verdict is not None and not state.verdict.accepted:
            return state.verdict.refusal
        if self.node_rank != 0:
            self._publish(own, 0.0)
            deadline = time.monotonic() + self.params.node_timeout_s + 2 * heartbeat_interval(self.params.node_timeout_s)
            while not (self._node0_ended(state) or state.store_error or 0 in state.exits) \
                    and time.monotonic() < deadline:
                time.sleep(0.5)
                state = self.link.snapshot()
            return self._node0_ended(state, by_node_only=True) or (
                self._node0_lost(state) if state.store_error else None)
        deadline = time.monotonic() + self.params.node_timeout_s + 2 * heartbeat_interval(self.params.node_timeout_s)
        while time.monotonic() < deadline:
            state = self.link.snapshot()
            lost = self._silent(state, self.params.node_timeout_s)
            if lost:
                return lost
            if all(k in state.exits for k in range(1, self.params.nnodes)):
                break
            time.sleep(0.5)
        return None

    def other_failures(self) -> str:
        """Node 0: how the other nodes' launches failed, each in its own words (the first failure
        may be there: node 0's ranks often fail only as its echo)."""
        exits = self.link.snapshot().exits
        return "; ".join(f"node {k} (host {e.host}): {e.reason}" for k, e in sorted(exits.items())
                         if k != self.node_rank and e.status != "ok" and e.reason)

    def ranks_note(self) -> Optional[str]:
        """Where global rank 0 ran, when not on node 0 (torchrun's c10d orders the nodes by host
        name and process id, not by node_rank)."""
        first = self.link.snapshot().ranks.get(0)
        if first is None or first.node_rank == 0:
            return None
        return (f"global rank 0 ran on node {first.node_rank} (host {first.host}): torchrun's c10d rendezvous "
                "orders the nodes by host name and process id, not node_rank; its metrics and weights are in "
                "the shared output_dir")

    def _publish(self, report: NodeExit, wait_s: float) -> None:
        report.host = self.card.host
        report.versions = self.card.versions
        report.token = self.card.token
        self.link.send_exit(report, wait_s)

    def finish(self, report: NodeExit) -> list[NodeRow]:
        """Leave this node's exit (file and store); node 0: wait a bounded time for the others'
        and give the job's rows. The link stops here."""
        rows: list[NodeRow] = []
        try:
            self._publish(report, STORE_OP_S)
            atomic_write_json(Path(self.plan.output_dir) / NODES_FOLDER / f"node{self.node_rank}.json",
                              scrub_obj(to_mapping(report)))
            if self.node_rank == 0:
                rows = self._rows(report)
        finally:
            self.link.stop()
            self.store = None  # node 0's store closes with its last reference
        return rows

    def _rows(self, own: NodeExit) -> list[NodeRow]:
        deadline = time.monotonic() + EXIT_WAIT_S
        nodes = range(self.params.nnodes)
        while True:
            state = self.link.snapshot()
            exits = {**self._exit_files(), **state.exits, 0: own}
            gone = {k for k, s in state.silent_s.items() if s > self.params.node_timeout_s}
            if all(k in exits or k in gone or k not in state.cards for k in nodes) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rows = []
        for k in nodes:
            card, done = state.cards.get(k), exits.get(k)
            versions = (done.versions if done else None) or (card.versions if card else {})
            rows.append(NodeRow(
                node_rank=k, host=(done.host if done else "") or (card.host if card else "?"),
                ranks=sorted(r for r, c in state.ranks.items() if c.node_rank == k),
                status=done.status if done else ("never joined" if card is None else "no report"),
                exit_code=done.exit_code if done else None, reason=done.reason if done else None,
                log_path=done.log_path if done else "", versions=dict(versions),
                versions_differ=[f"{name} {a} -> {b}" for name, a, b in differences(self.card.versions, versions)]
                if k and versions else []))
        return rows

    def _exit_files(self) -> dict[int, NodeExit]:
        found = {}
        for path in (Path(self.plan.output_dir) / NODES_FOLDER).glob("node*.json"):
            data = read_json_object(path)[0]
            report = from_mapping(NodeExit, data) if data else None
            if report is not None and report.token == self.card.token:
                found[report.node_rank] = report
        return found


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else f"{counted(len(ranks), 'rank')} {ranks}"
