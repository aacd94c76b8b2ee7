"""This node's part of a multi-node launch (hyport_lib/train/job_nodes.py) without any process:
node 0's store and two links in threads of this test, or a link's state given by hand."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from hyport_lib.nodes.handshake import NodeCard, verdict
from hyport_lib.nodes.heartbeat import LinkState, NodeExit, NodeLink, client_store, host_store
from hyport_lib.train.job_nodes import JobNodes, NodeStop
from hyport_lib.train.launch import collect
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import free_port


def _nodes(node_rank: int, state: LinkState, tmp_path, rdzv_id="job-a", **params) -> JobNodes:
    """A JobNodes whose link says ``state`` (what the launcher reads of it)."""
    nodes = JobNodes.__new__(JobNodes)
    nodes.params = Params(nnodes=2, node_rank=node_rank, master_port=29500, join_timeout_s=15, node_timeout_s=2,
                          **params)
    nodes.plan = SimpleNamespace(params=nodes.params, rdzv_id=rdzv_id, master_addr="127.0.0.1", master_port=29500,
                                 output_dir=str(tmp_path))
    nodes.node_rank, nodes.started, nodes.store = node_rank, time.monotonic(), None
    nodes.card = NodeCard(node_rank=node_rank, host=f"h{node_rank}", token="t")
    sent = []
    nodes.link = SimpleNamespace(snapshot=lambda: state, send_exit=lambda report, wait_s: sent.append(report),
                                 stop=lambda: None, sent=sent)
    return nodes


def test_node_0_names_a_node_that_joined_its_store_with_another_rdzv_id(tmp_path):
    port = free_port()
    server = host_store(port, 5.0)
    own = NodeCard(node_rank=0, host="h0")
    links = [NodeLink(lambda: dist.PrefixStore("hyport/job-a/", server), own, 2, 2, 0.5, rdzv_id="job-a"),
             NodeLink(lambda: client_store("127.0.0.1", port, "job-b", 5.0), NodeCard(node_rank=1, host="h1"),
                      2, 2, 0.5, rdzv_id="job-b")]
    for link in links:
        link.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (1 in links[0].snapshot().strangers
                                                   and 0 in links[1].snapshot().strangers):
            time.sleep(0.1)
        node0, node1 = links[0].snapshot(), links[1].snapshot()
    finally:
        for link in links:
            link.stop()
    assert 1 not in node0.cards and node0.strangers[1].rdzv_id == "job-b"
    said = _nodes(0, node0, tmp_path).join_reason()
    assert said == ("1 of 2 nodes joined within join_timeout_s=15: node 1 (host h1) joined with rdzv_id=job-b, "
                    "not job-a (give every node the same rdzv_id, or none and the same run_name and master_port: "
                    "the id is derived from them)")
    node1_nodes = _nodes(1, node1, tmp_path, rdzv_id="job-b")
    assert node1_nodes.waiting_for() == [0]
    assert node1_nodes.join_reason().startswith("node 0 (host h0) joined with rdzv_id=job-a, not job-b")


def test_a_node_stops_with_node_0s_end_when_node_0_ended_not_ok(tmp_path):
    ended = NodeExit(node_rank=0, host="h0", status="interrupted",
                     reason="stopped by a signal after step 1 (metrics and complete checkpoints kept)")
    state = LinkState(connected=True, cards={0: NodeCard(), 1: NodeCard(node_rank=1)}, exits={0: ended})
    nodes = _nodes(1, state, tmp_path)
    with pytest.raises(NodeStop) as stop:
        nodes.check()
    expected = "node 0 (host h0) ended interrupted: stopped by a signal after step 1 (metrics and complete checkpoints kept)"
    assert stop.value.reason == expected
    # Its torchrun ended first (its ranks fail as node 0's echo): its own exit is published, node 0's end named.
    own = NodeExit(node_rank=1, status="failed", reason="torchrun: exit code 1; first failure: rank 1: exit code 1")
    assert nodes.failure_reason(own) == expected
    assert nodes.link.sent == [own] and own.host == "h1"
    fine = _nodes(1, LinkState(connected=True, cards=state.cards, exits={0: NodeExit(status="ok")}), tmp_path)
    fine.check()  # node 0 ended ok: nothing to stop


def test_a_node_whose_own_rank_failed_keeps_its_own_failure_not_node_0s_echo(tmp_path):
    """Node 0's ranks failed as the echo of node 1's (their torchrun failure): node 1 names its
    own first failure (and triages its own logs), never 'node 0 ended failed'."""
    echo = NodeExit(node_rank=0, host="h0", status="failed",
                    reason="torchrun: exit code 1; first failure: rank 0: Connection closed by peer")
    state = LinkState(connected=True, cards={0: NodeCard(), 1: NodeCard(node_rank=1)}, exits={0: echo})
    own = NodeExit(node_rank=1, status="failed", reason="torchrun: exit code 1; first failure: rank 1: out of memory")
    assert _nodes(1, state, tmp_path).failure_reason(own) is None
    # node 0 stopped for a reason of the job's nodes: that is named
    lost = NodeExit(node_rank=0, host="h0", status="failed", reason="node 2 (host h2, rank 2) stopped answering 20 s ago")
    state.exits = {0: lost}
    assert _nodes(1, state, tmp_path).failure_reason(own) == f"node 0 (host h0) ended failed: {lost.reason}"


def test_a_node_writes_its_exit_file_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_SeCrEtVaLuE123")
    nodes = _nodes(1, LinkState(), tmp_path)
    nodes.card.versions = {"HCCL_WHITELIST_FILE": "x hf_SeCrEtVaLuE123"}
    nodes.finish(NodeExit(node_rank=1, status="failed", reason="rank 1: token hf_SeCrEtVaLuE123 refused"))
    text = (tmp_path / "nodes" / "node1.json").read_text()
    assert json.loads(text)["status"] == "failed" and "hf_SeCrEtVaLuE123" not in text


def test_a_node_stopped_by_a_signal_points_at_node_0s_record(tmp_path):
    plan = SimpleNamespace(params=Params(nnodes=2, node_rank=1, master_port=29500), output_dir=str(tmp_path),
                           metrics_path=str(tmp_path / "metrics.jsonl"), log_path=str(tmp_path / "node1.log"),
                           model_path=str(tmp_path), device_kind="cpu")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2)))
    result = collect(plan, None, 60.0, False, stopped=True)
    assert (result.status, result.reason) == ("interrupted",
                                              "stopped by a signal (the job's steps are in node 0's record)")


def test_two_launchers_given_the_same_node_rank_are_refused_by_node_0(tmp_path):
    port = free_port()
    server = host_store(port, 5.0)
    own = NodeCard(node_rank=0, host="h0")
    judge = lambda cards, twice: verdict(own, cards.values(), "node_local", None, twice)  # noqa: E731
    links = [NodeLink(lambda: dist.PrefixStore("hyport/job-a/", server), own, 3, 3, 0.5, judge=judge,
                      rdzv_id="job-a")]
    for host in ("ha", "hb"):
        links.append(NodeLink(lambda: client_store("127.0.0.1", port, "job-a", 5.0), NodeCard(node_rank=1, host=host),
                              3, 3, 0.5, rdzv_id="job-a"))
    for link in links:
        link.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(link.snapshot().verdict for link in links):
            time.sleep(0.1)
        said = [link.snapshot().verdict for link in links]
    finally:
        for link in links:
            link.stop()
    assert all(v is not None and v.refused_node == 1 for v in said), said
    assert said[0].refusal in ("node 1 given twice: hosts ha and hb (give each node its own node_rank)",
                               "node 1 given twice: hosts hb and ha (give each node its own node_rank)")
