"""A report on several hosts (hyport_lib/report/nodes.py), from records built by hand: the
node parameters placed or refused, node 0's index listing each node's part and the run's
hosts × cards, the drafts saying "2 hosts × 8 cards" (one host's wording unchanged), the
reproduce command for every node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hyport_lib.inference.agreement import NodeEntry
from hyport_lib.inference.grid import GridResult
from hyport_lib.report.blog import render_blog
from hyport_lib.report.index import render_index
from hyport_lib.report.nodes import NodePlace, RunShape, node_folder, node_place, read_node_runs, run_shape
from hyport_lib.report.runner import clean_run, hold_run_lock
from hyport_lib.utils.typed_records import to_mapping
from tests.blocking import returns_within
from tests.blog_drafts import make_run, train_data, unsourced, write_result


def test_node_parameters_place_the_report_or_are_refused_in_one_line():
    assert node_place({}, run_dir_given=False) == NodePlace(1, 0)
    assert node_place({"nnodes": 2, "node_rank": 1}, run_dir_given=True) == NodePlace(2, 1)
    with pytest.raises(ValueError, match=r"^nnodes=2: a report on several hosts needs --run-dir PATH"):
        node_place({"nnodes": 2, "node_rank": 0}, run_dir_given=False)
    with pytest.raises(ValueError, match=r"^node_rank=2: must be 0 \.\. nnodes-1 \(nnodes=2\)$"):
        node_place({"nnodes": 2, "node_rank": 2}, run_dir_given=True)


def test_nodes_from_places_the_report_as_the_stages_read_it(monkeypatch):
    """``-p nodes_from=env``: the report's place is what the variables say (as stage 01's and
    04's plans read them); a node_rank given against them is refused in one line."""
    for name in ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT",
                 "MA_NUM_HOSTS", "VC_TASK_INDEX", "VC_WORKER_HOSTS", "VC_WORKER_NUM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NNODES", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert node_place({"nodes_from": "env"}, run_dir_given=True) == NodePlace(2, 1)
    assert node_place({"nodes_from": "env", "node_rank": 0}, run_dir_given=True) == NodePlace(2, 1)
    with pytest.raises(ValueError, match=r"^nnodes=3 but NNODES=2 \(nodes_from='env'\): they disagree"):
        node_place({"nodes_from": "env", "nnodes": 3}, run_dir_given=True)
    with pytest.raises(ValueError, match=r"^nnodes=2: a report on several hosts needs --run-dir PATH"):
        node_place({"nodes_from": "env"}, run_dir_given=False)


def test_the_shape_counts_hosts_from_a_stage_else_the_report():
    assert run_shape({"hosts": 2, "cards": 8}, 1).line() == "2 hosts × 8 cards"
    assert run_shape({"cards": 8}, 3).line() == "3 hosts × 8 cards"
    assert run_shape({}, 2).line() == "2 hosts"
    assert RunShape(1, 8).line() == "8 cards" and RunShape(1, 1).line() == "1 card"


def _two_node_run(tmp_path, cards=8):
    """Node 0's run with a stage-04 record of 2 hosts × ``cards`` processes, and node 1's
    run.json in its own folder."""
    run = make_run(tmp_path, {"04_train": "PASS"}, parameters={"device": "npu", "nnodes": 2, "node_rank": 0})
    run.nnodes, run.host = 2, "host-a"
    data = train_data()
    data["plan"]["nproc_per_node"] = cards
    data["plan"]["world_size"] = 2 * cards
    data["plan"]["params"]["nnodes"] = 2
    write_result(run, "04_train", "PASS", data)
    node1 = node_folder(tmp_path, 1)
    node1.mkdir(parents=True)
    (node1 / "run.json").write_text(json.dumps({"host": "host-b", "status": "finished", "node_rank": 1,
                                                "stages": [{"stage": "04_train", "verdict": "PASS"},
                                                           {"stage": "05_weights", "verdict": "SKIP"}]}))
    return run


def test_node_0s_index_lists_each_node_and_the_hosts_times_cards(tmp_path):
    run = _two_node_run(tmp_path)
    index = render_index(run)
    assert "<h2>Nodes: 2 hosts × 8 cards</h2>" in index
    assert "<code>host-a</code>" in index and "<code>host-b</code>" in index
    assert '<code>&lt;run&gt;/nodes/node1</code> <a href="nodes/node1/index.html">index</a>' in index
    assert "PASS 1, SKIP 1" in index  # node 1's verdicts, from its own run.json
    (node_folder(tmp_path, 1) / "run.json").unlink()  # node 1 not started (or elsewhere): said so
    assert "no run.json yet" in render_index(run)
    nodes = read_node_runs(tmp_path, 2)
    assert [n.found for n in nodes] == [True, False] and nodes[0].host == "host-a"


def test_the_drafts_say_hosts_times_cards_and_where_each_node_wrote(tmp_path):
    run = _two_node_run(tmp_path)
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert en.splitlines()[0] == "# Porting notes: `tiny` on 2 hosts × 8 cards (`npu`, hyport run `20300101-000000-abcdef`)"
    assert "2 台主机 × 8 张卡" in zh.splitlines()[0]
    assert "on 2 hosts (node 0 on `host-a`, node 1 on `host-b`)" in en
    assert "in its folder: `<run>/nodes/node1`." in en and "节点 1 在 `host-b`" in zh
    assert 'hyport report --profile none -p device=npu -p nnodes=2 -p node_rank="$NODE_RANK" ' \
           '--run-dir "$RUN_DIR"' in en
    assert "-p node_rank=0" not in en
    assert unsourced(en, tmp_path) == [] and unsourced(zh, tmp_path) == []


def test_one_host_keeps_its_wording(tmp_path):
    run = make_run(tmp_path, {"04_train": "PASS"}, parameters={"device": "npu"})
    write_result(run, "04_train", "PASS", train_data())
    en = render_blog(run, "en")
    assert en.splitlines()[0].startswith("# Porting notes: `tiny` on 2 `npu` card(s)")
    assert "on the host `testhost`" in en and "hosts" not in en and "NODE_RANK" not in en
    assert 'id="nodes"' not in render_index(run)


def test_a_stage_left_to_node_0_shows_its_summary_on_the_node_card(tmp_path):
    run = make_run(tmp_path / "nodes" / "node1", {"01_environment": "SKIP"}, parameters={})
    run.nnodes, run.node_rank = 2, 1
    run.stages[0].summary = "runs on node 0: node 1 of 2 runs only the stages that take node_rank"
    write_result(run, "01_environment", "SKIP", {}, summary=run.stages[0].summary)
    index = render_index(run)
    assert "<p>runs on node 0: node 1 of 2" in index  # not the stage's own card of an empty record
    assert "Node 1 of 2 (2 hosts)" in index and 'href="../../index.html"' in index
    assert run.root_dir == tmp_path


# --------------------------------------------------------------------------- the review's defects
def test_the_shape_takes_each_reported_hosts_cards_over_node_0s_count():
    # stage 01's "cards" (node 0's own count) comes first; stage 03's cards of each host win
    assert run_shape({"cards": 1, "hosts": 2, "host_cards": [1, 3]}, 2).line() == "2 hosts, 4 cards"
    assert run_shape({"cards": 8, "hosts": 2, "host_cards": [8]}, 2).line() == "1 of 2 hosts × 8 cards"
    assert run_shape({"cards": 1, "hosts": 2, "host_cards": [1, 1]}, 2).line() == "2 hosts × 1 card"
    assert run_shape({"cards": 8, "host_cards": ["odd"]}, 2).line() == "2 hosts × 8 cards"  # an odd fact: ignored


def _stage_03_run(tmp_path, cards: list, nnodes: int = 2):
    """Node 0's run whose stage 03 merged ``len(cards)`` reported hosts of ``nnodes``, with
    ``cards[k]`` cards on host k."""
    run = make_run(tmp_path, {"03_inference": "PASS"}, parameters={"device": "cpu", "nnodes": nnodes, "node_rank": 0})
    run.nnodes = nnodes
    nodes = [NodeEntry(rank, f"host-{rank}", True, count, count) for rank, count in enumerate(cards)]
    nodes += [NodeEntry(rank, note="never reported within nodes_wait_s=5") for rank in range(len(cards), nnodes)]
    grid = GridResult([], True, [], Path("/shared/logs"), 1.0, nnodes=nnodes, nodes=nodes)
    write_result(run, "03_inference", "PASS", to_mapping(grid), headline={"hosts": grid.hosts_cards})
    return run


@pytest.mark.parametrize(("cards", "english", "chinese"), [
    ([1, 1], "on 2 hosts × 1 card (`cpu`", "2 台主机 × 1 张卡"),
    ([1, 3], "on 2 hosts, 4 cards (`cpu`", "2 台主机，共 4 张卡"),
    ([8], "on 1 of 2 hosts × 8 cards (`cpu`", "2 台主机中的 1 台 × 8 张卡")])
def test_the_title_and_index_say_hosts_times_cards_as_the_hosts_ran_them(tmp_path, cards, english, chinese):
    run = _stage_03_run(tmp_path, cards)
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert english in en.splitlines()[0] and chinese in zh.splitlines()[0]
    shape = english.partition("on ")[2].partition(" (")[0]
    assert f"<h2>Nodes: {shape}</h2>" in render_index(run)
    assert unsourced(en.splitlines()[0], tmp_path) == []


def test_a_nodes_run_json_that_is_a_fifo_or_a_link_out_is_not_read(tmp_path):
    run = tmp_path / "run"
    node_folder(run, 1).mkdir(parents=True)
    os.mkfifo(node_folder(run, 1) / "run.json")
    nodes = returns_within(lambda: read_node_runs(run, 2, own={"host": "a", "stages": []}))
    assert not nodes[1].found and "FIFO" in nodes[1].problem
    node_folder(run, 2).mkdir()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"host": "x", "stages": []}))
    (node_folder(run, 2) / "run.json").symlink_to(tmp_path / "elsewhere.json")
    outside = read_node_runs(run, 3, own={"host": "a", "stages": []})[2]
    assert not outside.found and "a link out of" in outside.problem


def test_cleaning_node_0s_killed_run_leaves_a_live_nodes_files_alone(tmp_path, monkeypatch):
    secret = "pa55-clean-node-7f3e"
    monkeypatch.setenv("DB_PASSWORD", secret)
    run = make_run(tmp_path, {"03_inference": "RUNNING"}, status="running")
    (tmp_path / "run.json").write_text(json.dumps(run.to_dict(), default=str))
    own_log, node1 = tmp_path / "logs" / "03_inference.log", node_folder(tmp_path, 1)
    (node1 / "logs").mkdir(parents=True)
    own_log.parent.mkdir()
    for log in (own_log, node1 / "logs" / "03_inference.log"):
        log.write_text(f"the secret is {secret}\n")
    lock = hold_run_lock(node1)  # node 1's report is still running
    try:
        clean_run(tmp_path, run.to_dict())
        assert secret not in own_log.read_text()
        assert (node1 / "logs" / "03_inference.log").read_text() == f"the secret is {secret}\n"  # not rewritten
    finally:
        lock.close()
        (node1 / ".runner.lock").unlink()
    clean_run(tmp_path, run.to_dict())  # node 1's runner gone: its files are scrubbed too
    assert secret not in (node1 / "logs" / "03_inference.log").read_text()
