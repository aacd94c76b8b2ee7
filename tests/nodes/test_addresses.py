"""This machine by name, by address and by what a name resolves to, within a time limit."""

from __future__ import annotations

import socket
import threading
import time

from hyport_lib.nodes.addresses import ThisMachine, host_names, port_taken, resolve_name

MACHINE = ThisMachine.of(["Node-B"], ["10.0.0.5", "fe80::1%eth0"])


def test_this_machine_by_its_names_addresses_loopback_and_resolved_names(monkeypatch):
    def fake(name, *args, **kwargs):
        answers = {"alias.job": "10.0.0.5", "self.job": "127.0.1.1", "peer.job": "10.0.0.6"}
        if name not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[name], 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert MACHINE.names == frozenset({"node-b"}) and MACHINE.addresses == frozenset({"10.0.0.5", "fe80::1"})
    assert MACHINE.is_host("NODE-B") and MACHINE.is_host("10.0.0.5") and MACHINE.is_host("fe80:0::1")
    assert MACHINE.is_host("localhost") and MACHINE.is_host("alias.job")
    assert MACHINE.is_host("self.job")  # /etc/hosts' 127.0.1.1 for the host's own name
    assert not MACHINE.is_host("peer.job") and not MACHINE.is_host("ghost.invalid")
    assert MACHINE.describe() == "node-b; 10.0.0.5, fe80::1"


def test_a_name_the_resolver_does_not_answer_for_is_not_this_machine_and_the_wait_is_bounded(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: release.wait(30) and [])
    started = time.monotonic()
    try:
        assert resolve_name("slow", 0.2) == []
        assert not MACHINE.is_host("slow", timeout_s=0.2)
    finally:
        release.set()
    assert time.monotonic() - started < 5


def test_the_real_host_answers_to_its_own_name():
    assert host_names()[0][0] == socket.gethostname()
    assert ThisMachine.here().is_host(socket.gethostname())


def test_the_full_host_name_is_looked_up_within_a_time_limit_and_giving_up_is_said(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(socket, "getfqdn", lambda *a: release.wait(30) and "never.example")
    started = time.monotonic()
    try:
        names, gave_up = host_names(timeout_s=0.2)
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert names == [socket.gethostname()]
    assert gave_up == "full host name not known: the resolver did not answer within 0.2 s"
    machine = ThisMachine.of(names, ["10.0.0.5"], gave_up)
    assert machine.describe().endswith("; 10.0.0.5; full host name not known: the resolver did not answer within 0.2 s")
    assert machine == ThisMachine.of(names, ["10.0.0.5"])  # the note is no part of what the machine is
    monkeypatch.setattr(socket, "getfqdn", lambda *a: "node-b.cluster")
    assert host_names() == ([socket.gethostname(), "node-b.cluster"], None)


def test_loopback_and_unspecified_addresses_ipv6_included_are_this_machine():
    here = ThisMachine.here()
    assert all(here.is_host(a) for a in ("::1", "0.0.0.0", "127.0.0.1", "localhost", socket.gethostname()))


def test_a_taken_port_is_said_and_a_free_one_is_none():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert port_taken(port) and port_taken(port, "127.0.0.1")
    assert port_taken(port) is None
