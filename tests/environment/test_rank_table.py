"""The rank table (RANK_TABLE_FILE): versions 1.0 and 1.2 parsed, a bad one named by file and
entry, this host found among its servers."""

from __future__ import annotations

import json

import pytest

from hyport_lib.environment.rank_table import (RankTableError, check_rank_table, names_a_host, parse_rank_table,
                                               rank_table_facts, read_rank_table)


def table_v10(servers=("10.0.0.1", "10.0.0.2"), cards=2) -> dict:
    return {"version": "1.0", "status": "completed", "server_count": str(len(servers)),
            "server_list": [{"server_id": sid, "container_ip": sid,
                             "device": [{"device_id": str(d), "device_ip": f"192.168.{s}.{d + 1}",
                                         "rank_id": str(s * cards + d)} for d in range(cards)]}
                            for s, sid in enumerate(servers)]}


def table_v12() -> dict:
    return {"version": "1.2", "status": "completed", "server_count": "2",
            "server_list": [{"server_id": f"node_{s}", "host_ip": f"172.16.0.{100 + s}",
                             "device": [{"device_id": str(d), "super_device_id": str(s * 2 + d),
                                         "device_ip": f"192.168.1.{s * 2 + d}", "rank_id": str(s * 2 + d)}
                                        for d in range(2)]} for s in range(2)],
            "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "node_0"},
                                                                      {"server_id": "node_1"}]}]}


def test_a_version_1_0_table_parses_and_names_this_host_by_its_server_id(tmp_path):
    path = tmp_path / "hccl.json"
    path.write_text(json.dumps(table_v10()))
    table = read_rank_table(str(path))
    assert (table.version, len(table.servers), table.ranks) == ("1.0", 2, 4)
    facts = rank_table_facts(table, None, str(path), ["127.0.0.1", "10.0.0.2"], ["h2"])
    assert facts.this_server == "10.0.0.2" and facts.this_ranks == [2, 3]
    assert facts.this_device_ips == {"0": "192.168.1.1", "1": "192.168.1.2"}
    check = check_rank_table(facts, ["10.0.0.2"], "h2")
    assert check.verdict == "PASS"
    assert "this host is server 10.0.0.2 (ranks 2-3)" in check.reason and "2 servers, 4 ranks" in check.reason


def test_a_version_1_2_table_parses_and_names_this_host_by_its_host_ip():
    table = parse_rank_table(json.dumps(table_v12()), "a3.json")
    assert table.version == "1.2" and table.servers[1].address == "172.16.0.101"
    assert all(d.super_device_id for s in table.servers for d in s.devices)
    assert table.server_naming(["172.16.0.101"], []).server_id == "node_1"
    renamed = table_v12()
    renamed["server_list"][0]["server_id"] = "worker-0.job"
    renamed["super_pod_list"][0]["server_list"][0]["server_id"] = "worker-0.job"
    table = parse_rank_table(json.dumps(renamed), "a3.json")
    assert table.server_naming(["10.9.9.9"], ["WORKER-0.job"]).server_id == "worker-0.job"  # by host name, any case


def test_a_table_that_names_another_host_fails_naming_the_file_and_this_host(tmp_path):
    path = tmp_path / "hccl.json"
    path.write_text(json.dumps(table_v10()))
    facts = rank_table_facts(read_rank_table(str(path)), None, str(path), ["10.0.0.9"], ["h9"])
    check = check_rank_table(facts, ["10.0.0.9", "127.0.0.1"], "h9")
    assert check.verdict == "FAIL"
    assert str(path) in check.reason and "no server_list entry names this host (h9; addresses 10.0.0.9, 127.0.0.1)" \
        in check.reason


# CANN's own v1.0 template (HCCL guide, hcclug_000067): server_id a label, no host_ip.
CANN_TEMPLATE = {"status": "completed", "version": "1.0", "server_count": "2", "server_list": [
    {"server_id": f"node_{s}", "device": [{"device_id": str(d), "device_ip": f"192.168.{s + 1}.{8 + d}",
                                          "rank_id": str(s * 2 + d)} for d in range(2)]} for s in range(2)]}


def test_a_server_id_names_a_host_only_as_an_address_or_a_host_name():
    assert [names_a_host(i) for i in ("10.0.0.1", "fe80::1", "worker-0.job", "node0")] == [True] * 4
    assert [names_a_host(i) for i in ("node_0", "1", "-a", "10.0.0")] == [False] * 4
    table = parse_rank_table(json.dumps(CANN_TEMPLATE), "hccl.json")
    assert [s.address for s in table.servers] == [None, None] and table.server_naming([], ["node_0"]) is None


def test_cann_s_template_warns_that_it_cannot_tell_this_host_s_server_instead_of_failing():
    table = parse_rank_table(json.dumps(CANN_TEMPLATE), "hccl.json")
    facts = rank_table_facts(table, None, "hccl.json", ["10.0.0.1", "127.0.0.1"], ["node0-host"])
    assert facts.this_server is None and facts.unnamed == ["node_0", "node_1"]
    check = check_rank_table(facts, ["10.0.0.1"], "node0-host")
    assert check.verdict == "WARN"
    assert "server_id node_0, node_1 are labels with no host_ip: cannot tell which server is this host" in check.reason


def test_a_label_s_server_is_found_by_rank_id_or_by_this_host_s_cards_device_ip():
    table = parse_rank_table(json.dumps(CANN_TEMPLATE), "hccl.json")
    by_rank = rank_table_facts(table, None, "hccl.json", ["10.0.0.1"], ["h"], rank_id="3")
    assert (by_rank.this_server, by_rank.this_ranks, by_rank.found_by) == ("node_1", [2, 3], "RANK_ID=3")
    assert by_rank.this_device_ips == {"0": "192.168.2.8", "1": "192.168.2.9"}
    check = check_rank_table(by_rank, ["10.0.0.1"], "h")
    assert check.verdict == "PASS" and "this host is server node_1 (ranks 2-3, by RANK_ID=3)" in check.reason
    by_card = rank_table_facts(table, None, "hccl.json", ["10.0.0.1"], ["h"], card_ips={0: "192.168.1.8"})
    assert (by_card.this_server, by_card.found_by) == ("node_0", "card 0's device_ip 192.168.1.8")
    both = rank_table_facts(table, None, "hccl.json", ["10.0.0.1"], ["h"], rank_id="3", card_ips={0: "192.168.1.8"})
    check = check_rank_table(both, ["10.0.0.1"], "h")
    assert both.this_server is None and check.verdict == "FAIL"
    assert "RANK_ID=3 is server node_1's but card 0's device_ip 192.168.1.8 is server node_0's" in check.reason
    unknown_rank = rank_table_facts(table, None, "hccl.json", ["10.0.0.1"], ["h"], rank_id="9")
    assert check_rank_table(unknown_rank, ["10.0.0.1"], "h").verdict == "WARN"


@pytest.mark.parametrize("change, words", [
    (lambda t: "{not json", "not JSON: Expecting property name enclosed in double quotes (line 1 column 2)"),
    (lambda t: {**t, "version": "2.0"}, "version '2.0': hyport knows 1.0 and 1.2"),
    (lambda t: {**t, "status": "initializing"}, "status 'initializing', not 'completed'"),
    # the file Ascend Operator starts with: no version yet, and it is the status that says so
    (lambda t: '{"status": "initializing"}', "status 'initializing', not 'completed': the table is not ready"),
    (lambda t: {**t, "server_count": "3"}, "server_count '3' but server_list has 2 servers"),
    (lambda t: {**t, "server_list": []}, "no server_list"),
    (lambda t: _device(t, 1, 0, device_ip=None), "server_list[1] (server_id 10.0.0.2).device[0]: no device_ip"),
    (lambda t: _device(t, 0, 1, rank_id="x"), "server_list[0] (server_id 10.0.0.1).device[1]: rank_id 'x' is not"),
    (lambda t: _device(t, 0, 1, device_ip="300.1.1.1"), "device_ip '300.1.1.1' is not an IP address"),
    (lambda t: _device(t, 1, 1, rank_id="0"), "rank_id 0 listed twice"),
    (lambda t: _device(t, 0, 1, device_id="0"), "device_id 0 listed twice"),
])
def test_a_bad_table_is_one_line_naming_the_file_and_the_entry(change, words):
    changed = change(table_v10())
    with pytest.raises(RankTableError) as caught:
        parse_rank_table(changed if isinstance(changed, str) else json.dumps(changed), "/etc/hccl.json")
    message = str(caught.value)
    assert message.startswith("/etc/hccl.json: ") and "\n" not in message
    assert words in message


def test_version_1_2_needs_a_super_device_id_and_known_pod_members():
    table = table_v12()
    del table["server_list"][0]["device"][1]["super_device_id"]
    with pytest.raises(RankTableError, match=r"server_list\[0\] \(server_id node_0\).device\[1\]: no super_device_id"):
        parse_rank_table(json.dumps(table), "t.json")
    table = table_v12()
    table["super_pod_list"][0]["server_list"].append({"server_id": "node_7"})
    with pytest.raises(RankTableError, match="super_pod_list\\[0\\]: server_id 'node_7' is not in server_list"):
        parse_rank_table(json.dumps(table), "t.json")


def test_a_missing_or_odd_file_fails_as_one_line(tmp_path):
    with pytest.raises(RankTableError, match=f"{tmp_path}/absent.json: cannot be read: no such file"):
        read_rank_table(str(tmp_path / "absent.json"))
    with pytest.raises(RankTableError, match="a folder, not a regular file"):
        read_rank_table(str(tmp_path))
    facts = rank_table_facts(None, "x.json: not JSON: ...", "x.json", [], [])
    assert check_rank_table(facts, [], "h").verdict == "FAIL"
    assert check_rank_table(None, [], "h").verdict == "SKIP"


def _device(table: dict, server: int, device: int, **values) -> dict:
    entry = table["server_list"][server]["device"][device]
    for key, value in values.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return table
