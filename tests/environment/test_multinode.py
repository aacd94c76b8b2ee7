"""Stage 01 on a job of several hosts: the node settings from parameters, torchrun, LLaMA-Factory,
ModelArts, a hostfile and the rank table; the whole stage judging them on CPU."""

from __future__ import annotations

import json
import socket
from collections import namedtuple
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from hyport_lib.environment import multinode as M
from hyport_lib.environment import stage
from hyport_lib.environment.params import Params
from hyport_lib.utils.typed_records import from_mapping, to_mapping

Addr = namedtuple("Addr", "family address netmask broadcast ptp")
Stat = namedtuple("Stat", "isup duplex speed mtu flags")


@pytest.fixture
def two_interfaces(monkeypatch):
    """This host: eth0 10.0.0.5 and lo (psutil's answer made up)."""
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "eth0": [Addr(socket.AF_INET, "10.0.0.5", None, None, None)],
        "lo": [Addr(socket.AF_INET, "127.0.0.1", None, None, None)]})
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {"eth0": Stat(True, 0, 0, 1500, ""),
                                                         "lo": Stat(True, 0, 0, 65536, "")})


def test_settings_come_from_the_parameter_first_then_the_variables_in_order():
    env = {"NNODES": "2", "MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "w-0.job,w-1.job",
           "PET_MASTER_PORT": "29600"}
    values, _ = M.node_values(env, {"master_port": 29700, "nnodes": None})
    said = {key: [(v.name, v.value) for v in found] for key, found in values.items()}
    assert said["nnodes"] == [("NNODES", 2), ("MA_NUM_HOSTS", 2)]
    assert said["node_rank"] == [("VC_TASK_INDEX", 1)]
    assert said["master_addr"] == [("VC_WORKER_HOSTS", "w-0.job")]
    assert said["master_port"] == [("parameter", 29700), ("PET_MASTER_PORT", 29600)]
    check = M.check_node_settings(values, None, None)
    assert check.verdict == "FAIL" and check.reason == "master_port disagrees: parameter=29700, PET_MASTER_PORT=29600"


# The lines of a value that is no number, a rank out of range and a port out of range are
# hyport_lib.nodes.inputs' (train says the same); an elastic PET_NNODES, which train refuses, fails.
@pytest.mark.parametrize("env, hostfile, table, words", [
    ({"NNODES": "two"}, None, None, "NNODES='two': expected a whole number"),
    ({"NNODES": "2", "MA_NUM_HOSTS": "4"}, None, None, "nnodes disagrees: NNODES=2, MA_NUM_HOSTS=4"),
    ({"NNODES": "2", "NODE_RANK": "2"}, None, None, "NODE_RANK=2 but NNODES=2: NODE_RANK must be 0 .. 1"),
    ({"NNODES": "2"}, 3, None, "NNODES=2 but the hostfile names 3 hosts"),
    ({"NNODES": "2"}, None, 4, "NNODES=2 but the rank table names 4 hosts"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "70000"}, None, None, "MASTER_PORT='70000': a port is 1 .. 65535"),
    ({"PET_NNODES": "1:2"}, None, None, "PET_NNODES='1:2': an elastic node range"),
    ({"PET_RDZV_ENDPOINT": "m:1", "MASTER_PORT": "2"}, None, None, "master_port disagrees: PET_RDZV_ENDPOINT=1, "
                                                                    "MASTER_PORT=2"),
])
def test_node_settings_that_contradict_each_other_fail(env, hostfile, table, words):
    check = M.check_node_settings(M.node_values(env, {})[0], hostfile, table)
    assert (check.name, check.verdict) == ("node_settings", "FAIL")
    assert words in check.reason


def test_the_master_address_is_compared_by_the_host_it_names():
    """An address and a name of the same host agree (resolved, within a time limit); another
    host, or a name that does not resolve, disagrees and says why."""
    known = {"node0": {"10.0.0.1"}, "node0.job": {"10.0.0.1"}, "node1": {"10.0.0.2"}, "10.0.0.1": {"10.0.0.1"},
             "10.0.0.2": {"10.0.0.2"}}
    asked = []

    def resolve(name):
        asked.append(name)
        if name == "slow.job":
            return set(), "slow.job not resolved within 5 s"
        return (known[name], None) if name in known else (set(), f"{name} does not resolve")

    def judged(env, given=None):
        return M.check_node_settings(M.node_values(env, given or {})[0], None, None, resolve=resolve)

    assert judged({"MASTER_ADDR": "node0", "PET_MASTER_ADDR": "10.0.0.1"}).verdict == "PASS"
    assert judged({"MASTER_ADDR": "NODE0", "VC_WORKER_HOSTS": "node0,node1"}).verdict == "PASS"
    assert sorted(asked) == ["10.0.0.1", "node0"]  # the same text, any case, is not looked up
    apart = judged({"MASTER_ADDR": "node1", "VC_WORKER_HOSTS": "node0.job,node1"}, {"master_addr": "10.0.0.1"})
    assert apart.verdict == "FAIL"
    assert apart.reason == "master_addr disagrees: parameter=10.0.0.1, MASTER_ADDR=node1 (different hosts)"
    unknown = judged({"MASTER_ADDR": "ghost", "PET_RDZV_ENDPOINT": "slow.job:29500"}, {"master_addr": "node0"})
    assert unknown.reason == ("master_addr disagrees: parameter=node0, PET_RDZV_ENDPOINT=slow.job, MASTER_ADDR=ghost "
                              "(ghost does not resolve; slow.job not resolved within 5 s)")
    assert M.addresses_of("127.0.0.1") == ({"127.0.0.1"}, None)
    assert M.addresses_of("no-such-host.invalid") == (set(), "no-such-host.invalid does not resolve")


def test_node_settings_pass_or_skip():
    ok = M.check_node_settings(M.node_values({"PET_NNODES": "2:2", "NODE_RANK": "0", "MASTER_ADDR": "h0"}, {})[0],
                               2, None)
    assert ok.verdict == "PASS" and ok.reason == "2 nodes (PET_NNODES), this is node 0 (NODE_RANK), master h0 (MASTER_ADDR)"
    assert M.check_node_settings(M.node_values({}, {})[0], None, None).verdict == "SKIP"
    one = M.check_node_settings(M.node_values({"MA_NUM_HOSTS": "1", "VC_TASK_INDEX": "0"}, {})[0], None, None)
    assert one.reason == "1 node (MA_NUM_HOSTS), this is node 0 (VC_TASK_INDEX)"
    assert M.check_node_settings(M.node_values({"NNODES": "2"}, {})[0], 1, None).reason == \
        "NNODES=2 but the hostfile names 1 host"


def _run(monkeypatch, env: dict, **params):
    for key in list(stage.os.environ):
        if key.startswith(("HCCL_", "MASTER_", "PET_", "MA_", "VC_")) or key in ("NNODES", "NODE_RANK",
                                                                                "RANK_TABLE_FILE"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    report = stage.run(stage.plan(Params(device="cpu", check_ports=False, **params)))
    return report, {c.name: c for c in report.checks}


def test_the_issue_s_case_fails_on_cpu_instead_of_skipping(monkeypatch, two_interfaces, tmp_path):
    """HCCL_SOCKET_IFNAME naming no interface, HCCL_IF_IP not on this host and a missing
    RANK_TABLE_FILE were a SKIP "no HCCL variables set" on CPU."""
    report, checks = _run(monkeypatch, {"HCCL_SOCKET_IFNAME": "=ens9", "HCCL_IF_IP": "10.9.9.9",
                                        "RANK_TABLE_FILE": str(tmp_path / "hccl.json")})
    assert checks["hccl_socket_ifname"].verdict == "FAIL"
    assert "selects no interface of this host (it has: eth0, lo)" in checks["hccl_socket_ifname"].reason
    assert checks["hccl_if_ip"].verdict == "FAIL" and "not an address of this host" in checks["hccl_if_ip"].reason
    assert checks["rank_table"].verdict == "FAIL"
    assert checks["rank_table"].reason == f"RANK_TABLE_FILE: {tmp_path}/hccl.json: cannot be read: no such file"
    assert "no HCCL variables set" not in checks["hccl_env"].reason
    assert stage.summarize(report).verdict == "FAIL"
    assert report.env_vars["RANK_TABLE_FILE"] == str(tmp_path / "hccl.json")


def test_a_job_of_two_hosts_is_collected_and_recorded(monkeypatch, two_interfaces, tmp_path):
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps({"version": "1.0", "status": "completed", "server_count": "2", "server_list": [
        {"server_id": sid, "device": [{"device_id": "0", "device_ip": f"192.168.{i}.1", "rank_id": str(i)}]}
        for i, sid in enumerate(("10.0.0.5", "127.0.0.1"))]}))
    with socket.socket() as listening:  # node 0 already up on this host's loopback
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        report, checks = _run(monkeypatch, {
            "RANK_TABLE_FILE": str(table), "MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "VC_WORKER_HOSTS": "127.0.0.1,localhost", "MA_OBS_SK": "hunter2-secret",
            "HCCL_SOCKET_IFNAME": "=eth0"})
    nodes = report.nodes
    assert (nodes.nnodes, nodes.node_rank, nodes.master_addr, nodes.master_port) == (2, 1, "127.0.0.1", port)
    assert nodes.sources == {"nnodes": "MA_NUM_HOSTS", "node_rank": "VC_TASK_INDEX", "master_addr": "MASTER_ADDR",
                             "master_port": "MASTER_PORT"}
    assert nodes.line == f"2 nodes, this one node 1; master 127.0.0.1:{port}"
    assert checks["node_settings"].verdict == "PASS"
    assert checks["rank_table"].verdict == "PASS" and "this host is server 10.0.0.5 (rank 0)" in checks["rank_table"].reason
    assert checks["master_port"].reason == f"127.0.0.1:{port} answers (node 0's rendezvous is up)"
    assert checks["hccl_socket_ifname"].reason == "HCCL_SOCKET_IFNAME==eth0 selects eth0 (10.0.0.5)"
    assert checks["peers_resolve"].verdict == "PASS"
    assert [p.name for p in nodes.peers] == ["10.0.0.5", "127.0.0.1", "localhost"]
    assert checks["roce_links"].verdict == "SKIP"  # no hccn_tool on this CPU host
    assert report.env_vars["VC_WORKER_HOSTS"] == "127.0.0.1,localhost" and "MA_OBS_SK" not in report.env_vars
    assert "hunter2-secret" not in stage.report_text(report)
    again = from_mapping(stage.EnvironmentReport, json.loads(json.dumps(to_mapping(report))))
    assert again.nodes.rank_table.this_server == "10.0.0.5" and again.nodes.interfaces[0].name == "eth0"


CANN_TEMPLATE = {"status": "completed", "version": "1.0", "server_count": "2", "server_list": [
    {"server_id": f"node_{s}", "device": [{"device_id": "0", "device_ip": f"192.168.{s + 1}.8", "rank_id": str(s)}]}
    for s in range(2)]}


def test_cann_s_template_of_labels_is_no_failure_and_rank_id_finds_this_host(monkeypatch, two_interfaces, tmp_path):
    """server_id node_0 / node_1 (CANN's own v1.0 template) is a label: neither resolved as a
    peer nor matched to this host; RANK_ID says which server is this host."""
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps(CANN_TEMPLATE))
    monkeypatch.delenv("RANK_ID", raising=False)
    report, checks = _run(monkeypatch, {"RANK_TABLE_FILE": str(table)})
    assert checks["rank_table"].verdict == "WARN" and "cannot tell which server is this host" in checks["rank_table"].reason
    assert checks["peers_resolve"].verdict == "SKIP" and report.nodes.peers == []
    assert "this host not known" in dict(M.node_rows(report.nodes))["rank table"]
    report, checks = _run(monkeypatch, {"RANK_TABLE_FILE": str(table), "RANK_ID": "1"})
    assert checks["rank_table"].verdict == "PASS" and "this host is server node_1 (rank 1, by RANK_ID=1)" in \
        checks["rank_table"].reason
    assert dict(M.node_rows(report.nodes))["rank table"].endswith("this host node_1 (by RANK_ID=1)")


@pytest.mark.slow
def test_a_label_s_server_is_found_by_the_cards_device_ip_from_hccn_tool(monkeypatch, two_interfaces, tmp_path):
    table, cards = tmp_path / "hccl.json", tmp_path / "hccn.json"
    table.write_text(json.dumps(CANN_TEMPLATE))
    cards.write_text(json.dumps({"0": {"link": "UP", "ipaddr": "192.168.2.8"}}))
    monkeypatch.setenv("HYPORT_FAKE_HCCN_FILE", str(cards))
    doubles = str(Path(__file__).resolve().parents[1] / "doubles" / "bin")
    facts, checks = M.collect_node_facts({"RANK_TABLE_FILE": str(table), "PATH": doubles}, {}, None, "npu", [0])
    by_name = {c.name: c for c in checks}
    assert (facts.rank_table.this_server, facts.rank_table.found_by) == ("node_1", "card 0's device_ip 192.168.2.8")
    assert by_name["rank_table"].verdict == "PASS" and by_name["roce_links"].verdict == "PASS"


def test_node_parameters_take_the_place_of_the_environment(monkeypatch, two_interfaces, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=1\nno-such-peer.invalid slots=1\n")
    with socket.socket() as held:
        held.bind(("", 0))
        port = held.getsockname()[1]
        _, checks = _run(monkeypatch, {"MASTER_ADDR": "10.7.7.7"}, master_addr="127.0.0.1", master_port=port,
                         node_rank=0, nodes_from=str(hostfile))
        assert checks["master_port"].verdict == "FAIL" and f"port {port} (parameter={port})" in checks["master_port"].reason
    # the parameter and the hostfile's first host agree; MASTER_ADDR names another host
    assert checks["node_settings"].verdict == "FAIL"
    assert checks["node_settings"].reason == "master_addr disagrees: parameter=127.0.0.1, MASTER_ADDR=10.7.7.7 " \
                                             "(different hosts)"
    _, checks = _run(monkeypatch, {"MASTER_ADDR": "localhost"}, master_addr="127.0.0.1", master_port=port,
                     node_rank=0, nodes_from=str(hostfile))
    assert checks["node_settings"].verdict == "PASS" and "2 nodes (hostfile / rank table)" in checks["node_settings"].reason
    assert checks["peers_resolve"].verdict == "FAIL"
    assert "no-such-peer.invalid (hostfile line 2)" in checks["peers_resolve"].reason


def test_the_nodes_reach_the_page_the_index_card_and_both_drafts(tmp_path):
    from blog_drafts import stage_draft

    from hyport_lib.environment.show import blog_facts, glance, nodes_frame
    from hyport_lib.environment.rank_table import RankTableFacts
    from hyport_lib.results import read_record

    nodes = M.NodeFacts(host_name="node-b", nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500,
                        sources={"nnodes": "NNODES", "node_rank": "NODE_RANK", "master_addr": "MASTER_ADDR",
                                 "master_port": "torchrun's default"},
                        rank_table=RankTableFacts("/job/hccl.json", "1.0", 2, 16, "10.0.0.2", list(range(8, 16))))
    report = stage.EnvironmentReport(system={}, versions={}, cann=stage.CannFacts(), devices=[], env_vars={},
                                     checks=[], nodes=nodes, device="cpu", num_cards=2)
    data = to_mapping(report)
    frame = nodes_frame(report)
    assert dict(zip(frame["fact"], frame["value"]))["master"] == "10.0.0.1:29500 (MASTER_ADDR, torchrun's default)"
    assert "this host 10.0.0.2" in dict(zip(frame["fact"], frame["value"]))["rank table"]
    assert "- node rank: 1 (NODE_RANK)" in stage.report_text(report)
    record = read_record({"stage": stage.STAGE, "verdict": "PASS", "data": data}, stage.EnvironmentReport)
    assert ("nodes", "2 nodes, this one node 1; master 10.0.0.1:29500") in glance(record)
    assert blog_facts(record)["nodes"] == "2 nodes, this one node 1; master 10.0.0.1:29500"
    assert "| Hosts of the job | 2 nodes, this one node 1; master 10.0.0.1:29500 |" in stage_draft(tmp_path, stage.STAGE, data)
    assert "| 作业的主机 |" in stage_draft(tmp_path, stage.STAGE, data, "zh")
    one_host = read_record({"stage": stage.STAGE, "verdict": "PASS", "data": to_mapping(
        stage.EnvironmentReport(system={}, versions={}, cann=stage.CannFacts(), devices=[], env_vars={}, checks=[],
                                nodes=M.NodeFacts(host_name="h")))}, stage.EnvironmentReport)
    assert blog_facts(one_host)["nodes"] is None and all(k != "nodes" for k, _ in glance(one_host))


def test_nodes_from_is_read_as_train_reads_it(monkeypatch, two_interfaces, tmp_path):
    """A hostfile as DeepSpeed reads it (this machine's line, the first host the master); "env":
    train's refusal of the variables fails node_settings too."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# the job\n10.0.0.5 slots=1\nno-such-peer.invalid slots=1\n")
    report, checks = _run(monkeypatch, {"MASTER_PORT": "29511"}, nodes_from=str(hostfile))
    nodes = report.nodes
    assert (nodes.nnodes, nodes.node_rank, nodes.master_addr, nodes.master_port) == (2, 0, "10.0.0.5", 29511)
    assert nodes.sources["node_rank"] == f"hostfile {hostfile} line 2 (10.0.0.5: this machine)"
    assert checks["node_settings"].verdict == "PASS" and nodes.hostfile == str(hostfile)
    assert checks["master_port"].verdict == "PASS" and "node 0: port 29511" in checks["master_port"].reason
    hostfile.write_text("node7 slots=1\nnode8 slots=2\n")
    _, checks = _run(monkeypatch, {}, nodes_from=str(hostfile))
    assert checks["node_settings"].verdict == "FAIL"
    assert checks["node_settings"].reason == (f"hostfile {hostfile}: the slots differ (line 1: node7 slots=1, "
                                              "line 2: node8 slots=2); hyport runs the same number of processes "
                                              "on every node")
    hostfile.write_text("node7 slots=1\nnode8 slots=1\n")
    _, checks = _run(monkeypatch, {}, nodes_from=str(hostfile))
    assert checks["node_settings"].reason.startswith("this machine (") and f"is not in hostfile {hostfile}" in \
        checks["node_settings"].reason
    _, checks = _run(monkeypatch, {"NNODES": "2", "NODE_RANK": "1"}, nodes_from="env")
    assert checks["node_settings"].verdict == "FAIL"
    assert checks["node_settings"].reason.startswith("NNODES=2 but MASTER_ADDR is not set")
    _, checks = _run(monkeypatch, {"NNODES": "2", "NODE_RANK": "1"})  # the parameters as given: no refusal
    assert checks["node_settings"].verdict == "PASS"


def test_the_node_parameters_are_trains_but_for_optionality():
    from hyport_lib.params import parameter_fields
    from hyport_lib.train.params import Params as TrainParams

    mine = {f.name: f for f in parameter_fields(Params)}
    train = {f.name: f for f in parameter_fields(TrainParams)}
    assert mine["nodes_from"] == train["nodes_from"]  # spec, doc and default
    shared = ["nnodes", "node_rank", "master_addr", "master_port"]
    assert set(shared) <= set(mine) and set(shared) <= set(train)
    for name in shared:
        assert mine[name].optional and mine[name].default is None
        spec, train_spec = replace(mine[name].spec, doc=""), replace(train[name].spec, doc="")
        assert (mine[name].kind, spec) == (train[name].kind, train_spec)


def test_a_full_host_name_the_resolver_did_not_give_in_time_is_said_in_the_report(monkeypatch, two_interfaces):
    monkeypatch.setattr(M, "host_names", lambda: (["node-b"], "full host name not known: the resolver did not "
                                                              "answer within 5 s"))
    report, _ = _run(monkeypatch, {})
    assert dict(M.node_rows(report.nodes))["host name"] == ("node-b (full host name not known: the resolver did "
                                                            "not answer within 5 s)")
