"""Each card's RoCE link through hccn_tool: its output parsed, each failure line, and the test
double (tests/doubles/bin/hccn_tool) end to end."""

from __future__ import annotations

import json
import os

import pytest

from hyport_lib.environment.roce import (DRIVER_HCCN_TOOL, RoceLink, check_roce_links, find_hccn_tool, parse_ip,
                                         parse_link, query_links)

DOUBLES_BIN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "doubles", "bin")


def test_hccn_tool_s_output_is_parsed():
    assert parse_link("link status: UP\n") == "UP"
    assert parse_link("link status: down") == "DOWN"
    assert parse_link("device id 9 is invalid") is None
    assert parse_ip("ipaddr:192.168.1.8\nnetmask:255.255.255.0\n") == ("192.168.1.8", "255.255.255.0")
    assert parse_ip("") == (None, None)
    # a card without an address: both lines empty; the IP is not the next line's "netmask:"
    assert parse_ip("ipaddr:\nnetmask:\n") == (None, None)
    assert parse_ip("ipaddr: \t\nnetmask:255.255.0.0\n") == (None, "255.255.0.0")
    assert parse_ip("ipaddr:fe80::1\nnetmask:ffff::\n") == ("fe80::1", "ffff::")
    assert RoceLink(0, "UP", *parse_ip("ipaddr:\nnetmask:\n")).problem().startswith("card 0: no IP")


UP = [RoceLink(0, "UP", "192.168.1.8", "255.255.255.0"), RoceLink(1, "UP", "192.168.1.9", "255.255.255.0")]


@pytest.mark.parametrize("links, expected, words", [
    ([UP[0], RoceLink(1, "DOWN", "192.168.1.9")], None, "card 1: link DOWN"),
    ([UP[0], RoceLink(1, "UP", None)], None, "card 1: no IP (hccn_tool -i 1 -ip -s address"),
    ([UP[0], RoceLink(1, None, None, error="hccn_tool -i 1 -link -g exited 1: device id 1 is invalid")], None,
     "card 1: hccn_tool -i 1 -link -g exited 1: device id 1 is invalid"),
    (UP, {"1": "192.168.9.9"}, "card 1: IP 192.168.1.9, the rank table's device_ip is 192.168.9.9"),
])
def test_each_link_problem_fails_a_job_of_several_hosts(links, expected, words):
    check = check_roce_links("npu", "/bin/hccn_tool", [0, 1], links, True, expected)
    assert (check.name, check.verdict) == ("roce_links", "FAIL")
    assert check.reason.startswith(words) and "card 0" not in check.reason


def test_links_up_with_addresses_pass_and_one_host_only_warns():
    check = check_roce_links("npu", "/bin/hccn_tool", [0, 1], UP, True, {"0": "192.168.1.8"})
    assert check.verdict == "PASS" and check.reason == "2 RoCE links UP, each with an IP (card 0 192.168.1.8, 1 192.168.1.9)"
    one_host = check_roce_links("npu", "/bin/hccn_tool", [0, 1], [RoceLink(0, "DOWN", None)], False)
    assert one_host.verdict == "WARN" and "one host: HCCL does not use them" in one_host.reason


def test_without_hccn_tool_the_reason_is_given():
    cpu = check_roce_links("cpu", None, [], [], True)
    assert cpu.verdict == "SKIP" and f"hccn_tool not found (on PATH or at {DRIVER_HCCN_TOOL})" in cpu.reason
    npu = check_roce_links("npu", None, [0], [], True)
    assert npu.verdict == "WARN" and "cannot be checked" in npu.reason
    assert check_roce_links("npu", "/bin/hccn_tool", [], [], True).verdict == "SKIP"


def test_hccn_tool_is_found_on_path():
    assert find_hccn_tool({"PATH": DOUBLES_BIN}) == os.path.join(DOUBLES_BIN, "hccn_tool")


@pytest.mark.slow
def test_the_hccn_tool_double_end_to_end(tmp_path, monkeypatch):
    cards = tmp_path / "hccn.json"
    cards.write_text(json.dumps({"0": {"link": "UP", "ipaddr": "192.168.1.8"},
                                 "1": {"link": "DOWN", "ipaddr": "192.168.1.9"}, "2": {"link": "UP"}}))
    monkeypatch.setenv("HYPORT_FAKE_HCCN_FILE", str(cards))
    tool = find_hccn_tool({"PATH": DOUBLES_BIN})
    links = query_links(tool, [0, 1, 2, 3], timeout_s=30)
    assert [(l.card, l.link, l.ip) for l in links[:3]] == [(0, "UP", "192.168.1.8"), (1, "DOWN", "192.168.1.9"),
                                                           (2, "UP", None)]
    assert (links[2].ip, links[2].netmask) == (None, None)  # the double printed "ipaddr:" and "netmask:" empty
    assert links[0].netmask == "255.255.255.0" and links[3].error.startswith("hccn_tool -i 3 -link -g exited 1")
    check = check_roce_links("npu", tool, [0, 1, 2, 3], links, True)
    assert check.verdict == "FAIL"
    assert check.reason.split("; ")[:2] == ["card 1: link DOWN", "card 2: no IP (hccn_tool -i 2 -ip -s address ... "
                                                                 "netmask ...)"]
    assert "card 3: hccn_tool -i 3 -link -g exited 1: device id 3 is invalid" in check.reason
