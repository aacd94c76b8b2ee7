"""HCCL_SOCKET_IFNAME / HCCL_IF_IP against this host's interfaces (psutil's data made up),
the master port (loopback sockets) and the peers' names."""

from __future__ import annotations

import socket
from collections import namedtuple

import psutil
import pytest

from hyport_lib.environment import network as N
from hyport_lib.environment.network import Interface, Peer

HOST = [Interface("docker0", ["172.17.0.1"], True), Interface("eth0", ["10.0.0.5", "fe80::1"], True),
        Interface("eth1", ["10.1.0.5"], False), Interface("enp3", [], True), Interface("lo", ["127.0.0.1", "::1"], True)]


def test_the_interfaces_come_from_psutil(monkeypatch):
    Addr = namedtuple("Addr", "family address netmask broadcast ptp")
    Stat = namedtuple("Stat", "isup duplex speed mtu flags")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "eth0": [Addr(socket.AF_INET, "10.0.0.5", None, None, None),
                 Addr(socket.AF_INET6, "fe80::1%eth0", None, None, None), Addr(psutil.AF_LINK, "aa:bb", None, None, None)],
        "lo": [Addr(socket.AF_INET, "127.0.0.1", None, None, None)]})
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {"eth0": Stat(False, 0, 0, 1500, "")})
    found = N.collect_interfaces()
    assert [(i.name, i.addresses, i.up) for i in found] == [("eth0", ["10.0.0.5", "fe80::1"], False),
                                                            ("lo", ["127.0.0.1"], None)]
    assert N.local_addresses(found) == ["10.0.0.5", "fe80::1", "127.0.0.1"]


@pytest.mark.parametrize("value, selected", [
    ("eth", ["eth0", "eth1"]), ("=eth0", ["eth0"]), ("=eth", []), ("enp,eth", ["enp3", "eth0", "eth1"]),
    ("^eth,docker", ["enp3", "lo"]), ("^=eth0", ["enp3", "eth1", "docker0", "lo"]),
])
def test_hccl_socket_ifname_follows_cann_s_syntax(value, selected):
    assert N.parse_socket_ifname(value).select([i.name for i in HOST]) == selected


def test_an_exclusion_leaves_the_interface_hccl_picks_by_cann_s_priority():
    """CANN (HCCL_SOCKET_IFNAME): other interfaces by name, then docker's, then lo: with eth
    excluded HCCL takes enp1s0, not docker0, which comes first by name."""
    host = [Interface("docker0", ["172.17.0.1"], True), Interface("enp1s0", ["10.0.0.1"], True),
            Interface("lo", ["127.0.0.1"], True)]
    assert sorted(["lo", "docker0", "enp1s0", "abc"], key=N.hccl_priority) == ["abc", "enp1s0", "docker0", "lo"]
    check = N.check_socket_ifname("npu", {"HCCL_SOCKET_IFNAME": "^eth"}, host, True)
    assert check.reason == "HCCL_SOCKET_IFNAME=^eth selects enp1s0 (10.0.0.1)"
    check = N.check_socket_ifname("npu", {"HCCL_SOCKET_IFNAME": "^=enp1s0"}, host, True)
    assert check.reason == "HCCL_SOCKET_IFNAME=^=enp1s0 selects docker0 (172.17.0.1)"  # docker before lo


@pytest.mark.parametrize("value", ["", "=", "^", "eth,,enp", "^="])
def test_an_ifname_with_an_empty_name_is_refused(value):
    with pytest.raises(ValueError, match="has an empty interface name"):
        N.parse_socket_ifname(value)


@pytest.mark.parametrize("env, verdict, words", [
    ({"HCCL_SOCKET_IFNAME": "eth9"}, "FAIL", "HCCL_SOCKET_IFNAME=eth9 selects no interface of this host (it has: "
                                             "docker0, enp3, eth0, eth1, lo)"),
    ({"HCCL_SOCKET_IFNAME": "^eth,docker,enp,lo"}, "FAIL", "excludes every interface"),
    ({"HCCL_SOCKET_IFNAME": "=eth1,enp3"}, "FAIL", "selects eth1, enp3, none usable: eth1 is down; enp3 has no "
                                                   "IPv4 address"),
    ({"HCCL_SOCKET_IFNAME": "=eth0", "HCCL_SOCKET_FAMILY": "AF_INET6"}, "PASS", "selects eth0 (fe80::1)"),
    ({"HCCL_SOCKET_IFNAME": "==eth0"}, "FAIL", "'=eth0' is no interface name (syntax: eth,enp | =eth0"),
    ({"HCCL_SOCKET_IFNAME": "=eth0,ib"}, "PASS", "selects eth0 (10.0.0.5); ib matches none"),
    ({"HCCL_SOCKET_IFNAME": "=lo"}, "FAIL", "selects lo, a loopback interface: other hosts cannot reach"),
    ({}, "WARN", "HCCL_SOCKET_IFNAME and HCCL_IF_IP unset on a job of several hosts"),
    ({"HCCL_IF_IP": "10.0.0.5"}, "SKIP", "HCCL_IF_IP chooses"),
])
def test_hccl_socket_ifname_is_judged_against_the_host(env, verdict, words):
    check = N.check_socket_ifname("npu", env, HOST, multinode=True)
    assert (check.name, check.verdict) == ("hccl_socket_ifname", verdict), check.reason
    assert words in check.reason


def test_an_ifname_naming_no_interface_fails_on_cpu_too():
    assert N.check_socket_ifname("cpu", {"HCCL_SOCKET_IFNAME": "eth9"}, HOST, multinode=False).verdict == "FAIL"
    unset = N.check_socket_ifname("cpu", {}, HOST, multinode=False)
    assert unset.verdict == "SKIP" and "unset" in unset.reason


@pytest.mark.parametrize("env, verdict, words", [
    ({"HCCL_IF_IP": "10.9.9.9"}, "FAIL", "HCCL_IF_IP=10.9.9.9 is not an address of this host (its interfaces: "
                                         "docker0 172.17.0.1, eth0 10.0.0.5/fe80::1"),
    ({"HCCL_IF_IP": "eth0"}, "FAIL", "HCCL_IF_IP=eth0 is not an IP address"),
    ({"HCCL_IF_IP": "10.1.0.5"}, "FAIL", "HCCL_IF_IP=10.1.0.5 is eth1's, which is down"),
    ({"HCCL_IF_IP": "10.0.0.5", "HCCL_SOCKET_IFNAME": "=docker0"}, "WARN",
     "is eth0's, which HCCL_SOCKET_IFNAME==docker0 does not select; HCCL_IF_IP takes precedence"),
    ({"HCCL_IF_IP": "10.0.0.5", "HCCL_SOCKET_IFNAME": "eth"}, "PASS", "HCCL_IF_IP=10.0.0.5 is eth0's"),
    ({"HCCL_IF_IP": "FE80::0001"}, "PASS", "is eth0's"),
    ({}, "SKIP", "HCCL_IF_IP unset"),
])
def test_hccl_if_ip_must_be_held_by_this_host(env, verdict, words):
    check = N.check_if_ip(env, HOST)
    assert (check.name, check.verdict) == ("hccl_if_ip", verdict), check.reason
    assert words in check.reason


def test_node_0_needs_its_master_port_free(monkeypatch):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        check = N.check_master_port("127.0.0.1", port, f"MASTER_PORT={port}", 0, True)
        assert check.verdict == "FAIL"
        assert f"port {port} (MASTER_PORT={port}) cannot be bound on this host, node 0:" in check.reason
    free = N.check_master_port("127.0.0.1", port, "MASTER_PORT", None, True)
    assert free.verdict == "PASS" and "node 0: port" in free.reason and "is free" in free.reason


def test_node_0_away_from_master_addr_fails():
    check = N.check_master_port("10.0.0.1", 29500, "torchrun's default", 0, False,
                                bind=lambda port: pytest.fail("no bind test away from MASTER_ADDR"))
    assert check.verdict == "FAIL" and "10.0.0.1 is not an address of this host" in check.reason


def test_another_node_connects_to_the_master():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        up = N.check_master_port("127.0.0.1", port, "MASTER_PORT", 1, True)
        assert up.verdict == "PASS" and up.reason == f"127.0.0.1:{port} answers (node 0's rendezvous is up)"
    refused = N.check_master_port("127.0.0.1", port, "MASTER_PORT", 1, True)
    assert refused.verdict == "PASS" and "nothing listens yet" in refused.reason


@pytest.mark.parametrize("answer", ["no answer within 3 s", "network is unreachable", "does not resolve (x)"])
def test_a_master_that_does_not_answer_fails_naming_address_and_port(answer):
    check = N.check_master_port("10.0.0.1", 29500, "MASTER_PORT=29500", 1, False, connect=lambda a, p: answer)
    assert check.verdict == "FAIL"
    assert check.reason.startswith(f"10.0.0.1:29500 (MASTER_PORT=29500) not reachable from this node: {answer}")


def test_the_master_port_is_skipped_only_without_a_master():
    assert N.check_master_port(None, None, "", None, False).verdict == "SKIP"
    bad = N.check_master_port("10.0.0.1", None, "MASTER_PORT='abc'", 1, False)
    assert bad.verdict == "FAIL" and "MASTER_PORT='abc': not a port" in bad.reason


def test_a_connect_probe_to_an_unresolvable_name_says_so():
    assert N.connect_probe("no-such-host.invalid", 29500, timeout_s=2).startswith("does not resolve")


def test_peers_resolve_within_the_time_given(monkeypatch):
    def fake(name, *args, **kwargs):
        if name == "ghost":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    found = N.resolve_peers([Peer("node-1", "hostfile line 2"), Peer("ghost", "VC_WORKER_HOSTS")], timeout_s=2)
    assert [(p.name, p.addresses, p.error) for p in found] == [
        ("node-1", ["10.0.0.7"], None), ("ghost", [], "Name or service not known")]
    check = N.check_peers(found)
    assert check.verdict == "FAIL" and check.reason == \
        "does not resolve: ghost (VC_WORKER_HOSTS): Name or service not known"
    assert N.check_peers(found[:1]).reason == "1 peer resolves: node-1 (10.0.0.7)"
    assert N.check_peers([]).verdict == "SKIP"


def test_a_resolver_that_hangs_is_given_up_on(monkeypatch):
    import threading
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: release.wait(30) and [])
    try:
        found = N.resolve_peers([Peer("slow", "MASTER_ADDR")], timeout_s=0.2)
    finally:
        release.set()
    assert found[0].error == "no answer within 0.2 s"
