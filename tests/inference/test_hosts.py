"""Stage 03 across hosts (inference/hosts.py, inference/agreement.py): node 0's merge of the
hosts' card tables and its judgement across hosts, built by hand from the typed classes (no
process); then two "hosts" on this machine, each its own ``hyport infer --nnodes 2`` (one
CPU card each, loopback, one shared folder), and a node that never reports."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blog_drafts import english_runs, stage_draft, unsourced
from hyport_lib.commands import main
from hyport_lib.inference import hosts, stage
from hyport_lib.inference.grid import COLUMNS, CardOutputs, GridResult
from hyport_lib.inference.hosts import NodeTable, merge, read_table, table_path
from hyport_lib.nodes.shared_folder import read_token, token_path
from hyport_lib.inference.params import Params
from hyport_lib.inference.show import blog_values, card_log_picker, compact_frame, glance, log_tails_html
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.params import ParameterError
from hyport_lib.results import RUN_DIR_ENV, read_record, record
from hyport_lib.utils.typed_records import to_mapping
from tests.blocking import returns_within

FOLDER = Path("/shared/job")
TOKEN = "t0k3n"


def _grid(host: str, hashes: list[str], **config) -> GridResult:
    rows = [{**dict.fromkeys(COLUMNS), "card": card, "device": "cpu", "status": "ok", "output_hash": digest,
             "tokens_per_s": 10.0 + card, "cpu_fallback_warnings": 0} for card, digest in enumerate(hashes)]
    return GridResult(rows=rows, consistent=len(set(hashes)) == 1, differing_cards=[], log_dir=FOLDER / host,
                      wall_s=4.0, host=host, config=InferenceConfig(max_new_tokens=4, **config),
                      outputs={str(card): CardOutputs(f"answer {digest}", []) for card, digest in enumerate(hashes)})


def _merged(*grids: GridResult, nnodes: int = 0) -> GridResult:
    """Node 0's merge of ``grids``, each stamped as its node's run stamps it."""
    nnodes = nnodes or len(grids)
    grids = [dataclasses.replace(grid, nnodes=nnodes, node_rank=rank) for rank, grid in enumerate(grids)]
    tables = {rank: NodeTable(rank, grid.host, TOKEN, grid) for rank, grid in enumerate(grids)}
    return merge(grids[0], tables, nnodes, FOLDER, TOKEN, 5.0)


# --------------------------------------------------------------------------- the merge
def test_two_agreeing_hosts_merge_into_one_grid_of_host_rows_and_pass():
    merged = _merged(_grid("a", ["h", "h"]), _grid("b", ["h", "h"]))
    frame = merged.frame
    assert list(zip(frame["host"], frame["node"], frame["card"])) == [("a", 0, 0), ("a", 0, 1), ("b", 1, 0), ("b", 1, 1)]
    summary = stage.summarize(merged)
    assert summary.verdict == "PASS" and merged.consistent
    assert summary.summary == "All 4 finished cards on 2 hosts produced identical outputs (hash h)."
    assert summary.headline["hosts"] == "2 hosts × 2 cards" and summary.headline["cards ok"] == "4/4"
    assert [(e.node_rank, e.host, e.reported, e.cards, e.ok) for e in merged.nodes] == [
        (0, "a", True, 2, 2), (1, "b", True, 2, 2)]
    assert sorted(merged.outputs) == ["node 0 card 0", "node 0 card 1", "node 1 card 0", "node 1 card 1"]


def test_a_host_whose_answers_differ_is_named_and_only_its_card_marked():
    merged = _merged(_grid("a", ["h", "h"]), _grid("b", ["h", "x"]), _grid("c", ["h", "h"]))
    summary = stage.summarize(merged)
    assert summary.verdict == "WARN" and not merged.consistent  # as differing cards on one host
    assert "node 1 (host b) differs from the majority output (hash h) on 1 card (1)" in summary.summary
    assert "5 of 6 finished cards on 3 hosts agree" in summary.summary
    shown = compact_frame(merged.frame)
    assert list(shown.columns[:3]) == ["host", "node", "card"]
    assert list(shown["same_output"]) == ["yes", "yes", "yes", "NO", "yes", "yes"]  # card 1 of host b only


def test_a_node_that_never_reported_fails_the_job_and_the_present_hosts_are_kept():
    merged = _merged(_grid("a", ["h"]), _grid("b", ["h"]), nnodes=3)
    summary = stage.summarize(merged)
    assert summary.verdict == "FAIL" and not merged.consistent
    assert summary.summary.startswith("node 2: never reported within nodes_wait_s=5. ")
    assert "All 2 finished cards on 2 hosts produced identical outputs" in summary.summary
    assert list(merged.frame["host"]) == ["a", "b"]
    assert merged.nodes[2].table == str(FOLDER / "nodes" / "node2.json") and not merged.nodes[2].reported
    assert merged.hosts_cards == "2 of 3 hosts × 1 card"  # the hosts that reported


def test_a_node_that_ran_another_plan_is_named_and_fails_the_job():
    merged = _merged(_grid("a", ["h"]), _grid("b", ["h"], warmup_runs=0, model_path="/elsewhere/tiny"))
    summary = stage.summarize(merged)
    assert summary.verdict == "FAIL"
    assert "node 1 (host b): ran another plan: warmup_runs=0 (node 0: 1)." in summary.summary  # not model_path


def test_a_node_above_zero_judges_its_own_cards_and_never_the_job():
    own = GridResult(**{**vars(_grid("b", ["h"])), "nnodes": 2, "node_rank": 1})
    summary = stage.summarize(own)
    assert summary.verdict == "PASS" and "hosts" not in summary.headline
    assert summary.headline["node"] == "1 of 2"
    assert summary.summary.startswith("node 1 of 2 (host b) ran its own cards: Only card 0 finished")
    assert summary.summary.endswith("The job's record, its merged grid and verdict, is node 0's.")


def test_a_table_of_another_job_is_not_merged_and_the_wait_is_bounded(tmp_path):
    """Node 1's table holds a token node 0 did not write (a previous job): node 0 waits its
    nodes_wait_s, then says so, without merging it."""
    hosts._write_table(tmp_path, NodeTable(1, "b", "old", _grid("b", ["h"])))
    assert read_table(table_path(tmp_path, 1), tmp_path).grid.rows[0]["output_hash"] == "h"  # the typed round trip
    waits = []
    started = time.monotonic()
    merged = hosts._merge_when_reported(_grid("a", ["h"]), tmp_path, TOKEN, 2, 0.3, waits.append, 0.05)
    assert 0.3 <= time.monotonic() - started < 5
    assert waits and {w.waiting for w in waits} == {"node 1"}  # the live line's words
    assert list(merged.frame["host"]) == ["a"] and stage.summarize(merged).verdict == "FAIL"
    assert "node 1: never reported within nodes_wait_s=0.3 (its table there belongs to another job" \
        in merged.consistency_line


def test_a_node_that_does_not_see_node_0s_token_is_refused_in_one_line(tmp_path, capsys):
    code = main(["infer", "--device", "cpu", "--num-cards", "1", "--no-record", "--nnodes", "2",
                 "--node-rank", "1", "--nodes-wait-s", "0.5", "--log-dir", str(tmp_path / "local")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    host = os.uname().nodename
    assert f"node 1 (host {host}): does not see node 0's token in {tmp_path / 'local'}" in err
    assert "not shared storage" in err and not (tmp_path / "local" / "node1").exists()  # no card ran


def test_several_hosts_need_a_named_shared_folder_and_a_rank_below_nnodes(tmp_path, monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    with pytest.raises(ParameterError, match=r"nnodes=2: log_dir must name the folder every host shares"):
        stage.plan(Params(nnodes=2))
    # a report run's folder is the one every node is given: the hosts meet in it
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    assert stage.plan(Params(nnodes=2)).log_dir == tmp_path / "run" / "inference_logs"
    with pytest.raises(ParameterError, match=r"node_rank=2: must be below nnodes=2"):
        Params(nnodes=2, node_rank=2, log_dir="/shared")
    assert Params().nnodes == 1 and Params().node_rank == 0 and Params().nodes_wait_s == 600


def test_the_index_card_and_the_drafts_say_hosts_by_cards(tmp_path):
    merged = _merged(_grid("a", ["h", "h"]), _grid("b", ["h", "h"]), nnodes=2)
    record(stage, merged, directory=tmp_path)
    saved = json.loads((tmp_path / "03_inference.json").read_text())
    read = read_record(saved, GridResult)
    assert read.data.merged and ("hosts × cards", "2 hosts × 2 cards") in glance(read)
    assert blog_values(read)["sample_host"] == "a (node 0)"
    en = stage_draft(tmp_path, "03_inference", saved["data"])
    assert "The job ran on 2 hosts × 2 cards" in en
    assert "| Host | Node | Card |" in en and "| a | 0 | 0 |" in en.replace("`", "")
    assert "The answer of card 0 of host" in en
    zh = stage_draft(tmp_path, "03_inference", saved["data"], lang="zh")
    assert "2 台主机 × 2 张卡" in zh and not english_runs(zh)
    missing = _merged(_grid("a", ["h"]), nnodes=2)
    draft = stage_draft(tmp_path, "03_inference", to_mapping(missing))
    assert "- Node 1: never reported within nodes_wait_s=5." in draft
    assert not unsourced(draft, next(tmp_path.glob("03_inference-en-*")))


# --------------------------------------------------------------------------- two hosts, one machine
def _node(rank: int, shared: Path, results: Path, wait_s: float, nnodes: int = 2) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "hyport_lib", "infer", "--device", "cpu", "--num-cards", "1",
           "--max-new-tokens", "2", "--infer-timeout-s", "120", "--nnodes", str(nnodes), "--node-rank", str(rank),
           "--nodes-wait-s", str(wait_s), "--log-dir", str(shared)]
    return subprocess.Popen(cmd, env={**os.environ, "HYPORT_RESULTS_DIR": str(results)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(node: subprocess.Popen) -> tuple[str, str]:
    try:
        return node.communicate(timeout=180)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(timeout=10)


@pytest.mark.slow
def test_two_hosts_each_run_their_card_and_node_0_records_the_merged_grid(tmp_path):
    """Node 1 starts first and waits for node 0's token; both run one CPU card; node 0's
    record holds both hosts' rows and the job's PASS, node 1's only its own card."""
    shared = tmp_path / "shared"
    first = _node(1, shared, tmp_path / "results1", 90)
    time.sleep(1.0)
    zero = _node(0, shared, tmp_path / "results0", 90)
    (out0, err0), (_, err1) = _finish(zero), _finish(first)
    assert zero.returncode == 0 and first.returncode == 0, (err0[-2000:], err1[-2000:])
    assert "All 2 finished cards on 2 hosts produced identical outputs" in out0
    job = json.loads((tmp_path / "results0" / "03_inference.json").read_text())
    assert job["verdict"] == "PASS" and job["headline"]["hosts"] == "2 hosts × 1 card"
    assert [(r["node"], r["card"], r["status"]) for r in job["data"]["rows"]] == [(0, 0, "ok"), (1, 0, "ok")]
    assert (shared / "node0" / "card0.log").is_file() and (shared / "node1" / "card0.log").is_file()
    assert not token_path(shared).exists()  # node 0 took its token back
    own = json.loads((tmp_path / "results1" / "03_inference.json").read_text())
    assert own["data"]["nodes"] == [] and "hosts" not in own["headline"]
    assert own["summary"].endswith("The job's record, its merged grid and verdict, is node 0's.")
    assert json.loads(table_path(shared, 1).read_text())["node_rank"] == 1


@pytest.mark.slow
def test_a_node_that_never_reports_is_named_within_the_wait(tmp_path):
    shared = tmp_path / "shared"
    started = time.monotonic()
    zero = _node(0, shared, tmp_path / "results", 3)
    out, err = _finish(zero)
    took = time.monotonic() - started
    assert zero.returncode == 1, err[-2000:]
    assert "node 1: never reported within nodes_wait_s=3." in out and "waiting" in err  # the live line
    job = json.loads((tmp_path / "results" / "03_inference.json").read_text())
    assert job["verdict"] == "FAIL" and [r["status"] for r in job["data"]["rows"]] == ["ok"]
    assert took < 90, took


def test_the_merged_grids_logs_are_picked_by_host(tmp_path):
    grids = [_grid(host, ["h"]) for host in ("a", "b")]
    for rank, grid in enumerate(grids):
        log = tmp_path / f"node{rank}.log"
        log.write_text(f"the log of node {rank}\n")
        grid.rows[0]["log_path"] = str(log)
    merged = _merged(*grids)
    assert "the log of node 1" in merged.log_tail(0, node=1) and "node 0" in merged.log_tail(0)
    assert "<h4>b (node 1) card 0 — ok</h4>" in log_tails_html(merged)
    picker = card_log_picker(merged)
    picker.children[0].value = (1, 0)
    assert "the log of node 1" in picker.children[1].outputs[-1]["text"]


def test_node_0_stopped_while_waiting_keeps_its_cards_and_is_interrupted(tmp_path):
    def stop(progress):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        hosts._merge_when_reported(_grid("a", ["h"]), tmp_path, TOKEN, 2, 60, stop, 0.05)
    partial = stopped.value.partial
    assert list(partial.frame["host"]) == ["a"] and stage.summarize(partial).verdict == "INTERRUPTED"
    assert partial.nodes[1].note == "not reported when node 0 was stopped"


# --------------------------------------------------------------------------- the review's defects
def test_hosts_by_cards_counts_the_hosts_that_reported_and_each_ones_cards():
    one_each = _merged(_grid("a", ["h"]), _grid("b", ["h"]))
    assert one_each.hosts_cards == "2 hosts × 1 card"
    uneven = _merged(_grid("a", ["h"]), _grid("b", ["h", "h", "h"]))
    assert uneven.hosts_cards == "2 hosts, 4 cards"  # not node 0's count for every host
    missing = _merged(_grid("a", ["h"] * 8), nnodes=2)
    assert missing.hosts_cards == "1 of 2 hosts × 8 cards"
    assert stage.summarize(missing).headline["hosts"] == "1 of 2 hosts × 8 cards"


def test_the_draft_says_one_card_in_the_singular_and_the_hosts_that_reported(tmp_path):
    one_each = to_mapping(_merged(_grid("a", ["h"]), _grid("b", ["h"])))
    assert "The job ran on 2 hosts × 1 card:" in stage_draft(tmp_path, "03_inference", one_each)
    assert "2 台主机 × 1 张卡" in stage_draft(tmp_path, "03_inference", one_each, lang="zh")
    uneven = to_mapping(_merged(_grid("a", ["h"]), _grid("b", ["h", "h", "h"])))
    assert "The job ran on 2 hosts, 4 cards:" in stage_draft(tmp_path, "03_inference", uneven)
    missing = to_mapping(_merged(_grid("a", ["h", "h"]), nnodes=2))
    en = stage_draft(tmp_path, "03_inference", missing)
    assert "The job ran on 1 of 2 hosts × 2 cards:" in en
    zh = stage_draft(tmp_path, "03_inference", missing, lang="zh")
    assert "2 台主机中的 1 台 × 2 张卡" in zh and not english_runs(zh)
    assert not unsourced(en, sorted(tmp_path.glob("03_inference-en-*"))[-1])


def test_a_node_that_ran_with_another_nnodes_is_named_and_fails_the_job():
    a = dataclasses.replace(_grid("a", ["h"]), nnodes=2)
    b = dataclasses.replace(_grid("b", ["h"]), nnodes=3, node_rank=1)
    merged = merge(a, {0: NodeTable(0, "a", TOKEN, a), 1: NodeTable(1, "b", TOKEN, b)}, 2, FOLDER, TOKEN, 5.0)
    summary = stage.summarize(merged)
    assert summary.verdict == "FAIL" and not merged.consistent
    assert "node 1 (host b): ran another plan: nnodes=3 (node 0: 2)." in summary.summary


def test_a_fifo_token_or_a_table_linked_out_of_the_folder_is_never_read(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.mkfifo(token_path(shared))
    assert returns_within(lambda: read_token(shared)) is None  # a FIFO: no token, never waited on
    with pytest.raises(RuntimeError, match=r"does not see node 0's token"):
        hosts._wait_for_token(shared, 1, "b", 0.2, None, 0.05)
    hosts._write_table(tmp_path / "elsewhere", NodeTable(1, "b", TOKEN, _grid("b", ["h"])))
    table_path(shared, 1).parent.mkdir()
    table_path(shared, 1).symlink_to(table_path(tmp_path / "elsewhere", 1))
    assert read_table(table_path(tmp_path / "elsewhere", 1), tmp_path / "elsewhere") is not None
    assert read_table(table_path(shared, 1), shared) is None  # a link out of the shared folder


def test_a_second_host_with_the_same_node_rank_is_refused_naming_both(tmp_path):
    hosts._claim_rank(tmp_path, TOKEN, 1, "b")
    with pytest.raises(RuntimeError) as refused:
        hosts._claim_rank(tmp_path, TOKEN, 1, "c")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("node 1 (host c): node_rank=1 is already taken in this job by host b")
    hosts._claim_rank(tmp_path, "another-job", 1, "c")  # a claim is the job's: the next job's rank is free
    # a claim of this host whose process is gone (the node restarted) is taken over
    hosts.claim_path(tmp_path, TOKEN, 2).write_text(json.dumps({"host": "b", "pid": 2**22 + 1}))
    hosts._claim_rank(tmp_path, TOKEN, 2, "b")
    assert json.loads(hosts.claim_path(tmp_path, TOKEN, 2).read_text())["pid"] == os.getpid()


def test_a_second_node_0_on_the_folder_is_refused_and_leaves_the_first_ones_token(tmp_path):
    first = hosts._hold_node0_lock(tmp_path, "a")
    try:
        token_path(tmp_path).write_text(TOKEN)
        with pytest.raises(RuntimeError, match=r"^node 0 \(host z\): another node 0 is running on .* \(host a, pid "):
            hosts.run_node(_Plan(_Params(2, 0, 1.0), tmp_path), host="z")
        assert read_token(tmp_path) == TOKEN  # the first node 0's token is still there
    finally:
        first.close()
    hosts._hold_node0_lock(tmp_path, "z").close()  # free again once the first is done


@dataclasses.dataclass
class _Params:
    nnodes: int
    node_rank: int
    nodes_wait_s: float


@dataclasses.dataclass
class _Plan:
    params: _Params
    log_dir: Path


def test_node_0_stopped_during_its_cards_counts_the_tables_already_there(tmp_path, monkeypatch):
    """Node 1 reported while node 0's own cards ran; node 0 is stopped: node 1 is merged, not
    "not reported"; node 2, which had not reported, is said not waited for."""

    def cards_then_stop(plan, on_progress=None):
        token = read_token(tmp_path)
        b = dataclasses.replace(_grid("b", ["h"]), nnodes=3, node_rank=1)
        hosts._write_table(tmp_path, NodeTable(1, "b", token, b))
        stop = KeyboardInterrupt()
        stop.partial = _grid("a", ["h"])
        raise stop

    monkeypatch.setattr(hosts, "run_grid", cards_then_stop)
    with pytest.raises(KeyboardInterrupt) as stopped:
        hosts.run_node(_Plan(_Params(3, 0, 60.0), tmp_path), host="a")
    partial = stopped.value.partial
    assert list(partial.frame["host"]) == ["a", "b"]
    assert [(e.reported, e.note) for e in partial.nodes] == [
        (True, ""), (True, ""), (False, "not reported when node 0 was stopped")]
    assert stage.summarize(partial).verdict == "INTERRUPTED" and not token_path(tmp_path).exists()
