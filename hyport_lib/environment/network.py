"""This host's network as HCCL and torchrun's rendezvous use it: its interfaces
(``psutil``), what ``HCCL_SOCKET_IFNAME`` selects and whose ``HCCL_IF_IP`` is, the master
port (free on node 0, answering from the others) and the peers' names, each probe bounded
in time. The checks take the probes' findings, or a probe to call (tests pass their own).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

from hyport_lib.nodes.addresses import RESOLVE_TIMEOUT_S, port_taken, resolve_name
from hyport_lib.results import Check
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted

#: torchrun's ``--master-port`` default, used where MASTER_ADDR is set and no port is.
TORCHRUN_DEFAULT_PORT = 29500
CONNECT_TIMEOUT_S = 3.0


@dataclass
class Interface:
    """One network interface: its addresses (IPv4 and IPv6, without a ``%scope``) and
    whether it is up (None: not known)."""

    name: str
    addresses: list[str] = field(default_factory=list)
    up: Optional[bool] = None


def collect_interfaces() -> list[Interface]:
    import psutil

    stats = psutil.net_if_stats()
    found = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        ips = [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
        found.append(Interface(name, ips, stats[name].isup if name in stats else None))
    return found


def local_addresses(interfaces: Iterable[Interface]) -> list[str]:
    return [a for i in interfaces for a in i.addresses]


def _family(environ: Mapping[str, str]) -> int:
    return 6 if environ.get("HCCL_SOCKET_FAMILY", "").strip() == "AF_INET6" else 4


def _of_family(addresses: Iterable[str], version: int) -> list[str]:
    out = []
    for a in addresses:
        try:
            if ipaddress.ip_address(a).version == version:
                out.append(a)
        except ValueError:
            continue
    return out


# --- HCCL_SOCKET_IFNAME ---------------------------------------------------------------------
@dataclass(frozen=True)
class IfnameRule:
    """``HCCL_SOCKET_IFNAME`` as CANN documents it (environment variable reference,
    HCCL_SOCKET_IFNAME, envref_07_0075): ``eth,enp`` (prefixes), ``=eth0,enp0`` (exact names),
    ``^eth`` / ``^=eth0`` (all but those); HCCL takes the first match, the interfaces in its
    order of priority: all but docker and lo by name, then docker, then lo."""

    text: str
    exclude: bool
    exact: bool
    names: tuple[str, ...]

    def matches(self, name: str, entry: str) -> bool:
        return name == entry if self.exact else name.startswith(entry)

    def select(self, interfaces: Sequence[str]) -> list[str]:
        ordered = sorted(interfaces, key=hccl_priority)
        if self.exclude:
            return [n for n in ordered if not any(self.matches(n, e) for e in self.names)]
        picked: list[str] = []
        for entry in self.names:  # in the variable's order: HCCL takes the first match
            picked += [n for n in ordered if self.matches(n, entry) and n not in picked]
        return picked

    def unmatched(self, interfaces: Sequence[str]) -> list[str]:
        return [e for e in self.names if not any(self.matches(n, e) for n in interfaces)]


def hccl_priority(name: str) -> tuple[int, str]:
    """HCCL's order among interfaces (CANN, HCCL_SOCKET_IFNAME: "docker/lo以外网卡(网卡名字典序升序)
    > docker网卡 > lo网卡"): the others by name, then docker's, then the loopback."""
    return (2 if name == "lo" else 1 if name.startswith("docker") else 0), name


def parse_socket_ifname(text: str) -> IfnameRule:
    """ValueError (one line) for a value that names nothing (``=``, ``eth,,enp``)."""
    rest = text.strip()
    exclude = rest.startswith("^")
    rest = rest[1:] if exclude else rest
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    names = tuple(p.strip() for p in rest.split(","))
    syntax = "(syntax: eth,enp | =eth0,enp0 | ^eth | ^=eth0)"
    if not rest or any(not n for n in names):
        raise ValueError(f"HCCL_SOCKET_IFNAME={text!r} has an empty interface name {syntax}")
    odd = next((n for n in names if n[0] in "=^" or any(c.isspace() for c in n)), None)
    if odd is not None:
        raise ValueError(f"HCCL_SOCKET_IFNAME={text!r}: {odd!r} is no interface name {syntax}")
    return IfnameRule(text, exclude, exact, names)


def _described(interfaces: Sequence[Interface]) -> str:
    return ", ".join(f"{i.name} {'/'.join(i.addresses) or 'no address'}" for i in interfaces) or "none"


def check_socket_ifname(kind: str, environ: Mapping[str, str], interfaces: Sequence[Interface],
                        multinode: bool) -> Check:
    name = "hccl_socket_ifname"
    value = environ.get("HCCL_SOCKET_IFNAME")
    if value is None:
        if environ.get("HCCL_IF_IP"):
            return Check(name, "SKIP", "HCCL_SOCKET_IFNAME unset: HCCL_IF_IP chooses HCCL's address")
        if multinode and kind == "npu":
            return Check(name, "WARN", "HCCL_SOCKET_IFNAME and HCCL_IF_IP unset on a job of several hosts: "
                                       "HCCL picks the first interface by name (docker and lo last), which "
                                       "may not reach node 0; set HCCL_SOCKET_IFNAME==<interface>")
        return Check(name, "SKIP", "HCCL_SOCKET_IFNAME unset: HCCL picks an interface itself")
    try:
        rule = parse_socket_ifname(value)
    except ValueError as exc:
        return Check(name, "FAIL", str(exc))
    by_name = {i.name: i for i in interfaces}
    selected = rule.select(list(by_name))
    shown = f"HCCL_SOCKET_IFNAME={printable(value)}"
    if not selected:
        what = "excludes every interface" if rule.exclude else "selects no interface"
        return Check(name, "FAIL", f"{shown} {what} of this host (it has: {', '.join(sorted(by_name)) or 'none'})")
    version = _family(environ)
    usable = [by_name[n] for n in selected if by_name[n].up is not False
              and _of_family(by_name[n].addresses, version)]
    if not usable:
        why = "; ".join(f"{n} {'is down' if by_name[n].up is False else f'has no IPv{version} address'}"
                        for n in selected)
        return Check(name, "FAIL", f"{shown} selects {', '.join(selected)}, none usable: {why}")
    first = usable[0]
    if multinode and all(_is_loopback(a) for a in _of_family(first.addresses, version)):
        return Check(name, "FAIL", f"{shown} selects {first.name}, a loopback interface: other hosts "
                                   f"cannot reach {'/'.join(first.addresses)}")
    unmatched = "" if rule.exclude else ", ".join(rule.unmatched(list(by_name)))
    note = f"; {unmatched} matches none" if unmatched else ""
    return Check(name, "PASS", f"{shown} selects {first.name} ({'/'.join(_of_family(first.addresses, version))})"
                               f"{note}")


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def check_if_ip(environ: Mapping[str, str], interfaces: Sequence[Interface]) -> Check:
    name = "hccl_if_ip"
    value = environ.get("HCCL_IF_IP")
    if value is None:
        return Check(name, "SKIP", "HCCL_IF_IP unset")
    shown = f"HCCL_IF_IP={printable(value)}"
    try:
        wanted = ipaddress.ip_address(value.strip())
    except ValueError:
        return Check(name, "FAIL", f"{shown} is not an IP address")
    holder = next((i for i in interfaces for a in i.addresses if _same(a, wanted)), None)
    if holder is None:
        return Check(name, "FAIL", f"{shown} is not an address of this host (its interfaces: "
                                   f"{_described(interfaces)}); HCCL cannot bind it")
    if holder.up is False:
        return Check(name, "FAIL", f"{shown} is {holder.name}'s, which is down")
    ifname = environ.get("HCCL_SOCKET_IFNAME")
    if ifname:
        try:
            selected = parse_socket_ifname(ifname).select([i.name for i in interfaces])
        except ValueError:
            selected = []  # hccl_socket_ifname says why
        if holder.name not in selected:
            return Check(name, "WARN", f"{shown} is {holder.name}'s, which HCCL_SOCKET_IFNAME={printable(ifname)} "
                                       f"does not select; HCCL_IF_IP takes precedence, so HCCL uses {holder.name}")
    return Check(name, "PASS", f"{shown} is {holder.name}'s")


def _same(address: str, wanted) -> bool:
    try:
        return ipaddress.ip_address(address) == wanted
    except ValueError:
        return False


# --- master port ------------------------------------------------------------------------------
def connect_probe(address: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """``"answered"``, ``"refused"`` (the host is there, nothing listens yet), or why not:
    ``"no answer within 3 s"``, ``"network is unreachable"``, ``"does not resolve"``."""
    try:
        infos = resolve_name(address, timeout_s)
    except OSError as exc:
        return f"does not resolve ({exc.strerror or exc})"
    if not infos:
        return f"does not resolve within {timeout_s:g} s"
    family, address_resolved = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect((address_resolved, port))
        except ConnectionRefusedError:
            return "refused"
        except socket.timeout:
            return f"no answer within {timeout_s:g} s"
        except OSError as exc:
            return (exc.strerror or str(exc)).lower() if exc.errno != errno.ECONNREFUSED else "refused"
    return "answered"


def check_master_port(master_addr: Optional[str], port: Optional[int], port_from: str, node_rank: Optional[int],
                      master_is_local: bool, *, bind: Callable[[int], Optional[str]] = port_taken,
                      connect: Callable[[str, int], str] = connect_probe) -> Check:
    """Node 0 hosts the rendezvous on MASTER_ADDR: its port must be free there. Every other
    node must reach it: a refused connection is a host that answers (node 0 not started
    yet); a timeout or an unreachable network is a FAIL."""
    name = "master_port"
    if not master_addr:
        return Check(name, "SKIP", "no MASTER_ADDR (nor master_addr, VC_WORKER_HOSTS) set: a one-host job")
    if port is None:
        return Check(name, "FAIL", f"{port_from}: not a port (1-65535)")
    endpoint = f"{master_addr}:{port}"
    hosts = node_rank == 0 or (node_rank is None and master_is_local)
    if hosts:
        if not master_is_local:
            return Check(name, "FAIL", f"node_rank 0 hosts the rendezvous at MASTER_ADDR, but {master_addr} is "
                                       f"not an address of this host: start node 0 on {master_addr}, or set "
                                       "MASTER_ADDR to this host's address")
        taken = bind(port)
        if taken:
            return Check(name, "FAIL", f"port {port} ({port_from}) cannot be bound on this host, node 0: {taken} "
                                       "(another job? choose another master_port)")
        return Check(name, "PASS", f"node 0: port {port} ({port_from}) is free on this host ({master_addr})")
    answer = connect(master_addr, port)
    if answer == "answered":
        return Check(name, "PASS", f"{endpoint} answers (node 0's rendezvous is up)")
    if answer == "refused":
        return Check(name, "PASS", f"{endpoint} reachable: the host answers, nothing listens yet "
                                   "(node 0 not started)")
    return Check(name, "FAIL", f"{endpoint} ({port_from}) not reachable from this node: {answer} "
                               "(a firewall, or a wrong MASTER_ADDR)")


# --- peers ------------------------------------------------------------------------------------
@dataclass
class Peer:
    """A host another node runs on, and where its name was found."""

    name: str
    source: str
    addresses: list[str] = field(default_factory=list)
    error: Optional[str] = None


def resolve_peers(peers: Sequence[Peer], timeout_s: float = RESOLVE_TIMEOUT_S) -> list[Peer]:
    """Every name at once, all within ``timeout_s``."""
    results: dict[int, object] = {}

    def ask(i: int, peer: Peer):
        try:
            results[i] = resolve_name(peer.name, timeout_s)
        except OSError as exc:
            results[i] = exc

    threads = [threading.Thread(target=ask, args=(i, p), daemon=True) for i, p in enumerate(peers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + 0.5
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    out = []
    for i, peer in enumerate(peers):
        got = results.get(i)
        if isinstance(got, OSError):
            out.append(Peer(peer.name, peer.source, error=got.strerror or str(got)))
        elif got:
            out.append(Peer(peer.name, peer.source, [a for _, a in got]))
        else:
            out.append(Peer(peer.name, peer.source, error=f"no answer within {timeout_s:g} s"))
    return out


def check_peers(peers: Sequence[Peer]) -> Check:
    name = "peers_resolve"
    if not peers:
        return Check(name, "SKIP", "no peer named (no hostfile, rank table, VC_WORKER_HOSTS or MASTER_ADDR)")
    bad = [p for p in peers if p.error]
    if bad:
        return Check(name, "FAIL", "does not resolve: " + "; ".join(f"{p.name} ({p.source}): {p.error}" for p in bad))
    shown = ", ".join(f"{p.name} ({p.addresses[0]})" if p.addresses[0] != p.name else p.name for p in peers[:8])
    more = f" and {len(peers) - 8} more" if len(peers) > 8 else ""
    return Check(name, "PASS", f"{counted(len(peers), 'peer')} {'resolves' if len(peers) == 1 else 'resolve'}: {shown}{more}")
