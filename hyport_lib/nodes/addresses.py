"""Names and addresses of hosts: a name looked up within a time limit, the names this host
answers to, :class:`ThisMachine`, the one notion of "this host" (a hostfile's line, the
master's address, a rank table's server), and whether a port of this host is free."""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass, field
from typing import Iterable, Optional

#: How long a name is looked up before it counts as not resolving.
RESOLVE_TIMEOUT_S = 5.0


def resolve_name(name: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> list[tuple[int, str]]:
    """``(family, address)`` of ``name``; empty when the resolver did not answer in time
    (getaddrinfo has no timeout of its own: it runs in a daemon thread left behind)."""
    found: dict = {}

    def ask():
        try:
            found["infos"] = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a label IDNA cannot encode
            found["error"] = exc if isinstance(exc, OSError) else OSError(str(exc))

    thread = threading.Thread(target=ask, daemon=True, name=f"resolve {name}")
    thread.start()
    thread.join(timeout_s)
    if "error" in found:
        raise found["error"]
    return list(dict.fromkeys((i[0], i[4][0].split("%")[0]) for i in found.get("infos", [])))


def host_names(timeout_s: float = RESOLVE_TIMEOUT_S) -> tuple[list[str], Optional[str]]:
    """The names this host answers to (the rank table and MASTER_ADDR may use either): its
    short name and its full one, looked up within ``timeout_s`` (getfqdn asks the resolver,
    which has no time limit of its own: it runs in a daemon thread left behind). Also, where
    the resolver gave no answer in time, the line that says so (else None)."""
    found: dict = {}

    def ask():
        try:
            found["name"] = socket.getfqdn()
        except (OSError, UnicodeError) as exc:  # no resolver: the short name is all there is
            found["error"] = exc

    thread = threading.Thread(target=ask, daemon=True, name="getfqdn")
    thread.start()
    thread.join(timeout_s)
    names = [socket.gethostname(), found.get("name", "")]
    gave_up = f"full host name not known: the resolver did not answer within {timeout_s:g} s" \
        if thread.is_alive() else None
    return list(dict.fromkeys(n for n in names if n)), gave_up


def _address(text: str):
    try:
        return ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class ThisMachine:
    """What names this machine: its host names (lower case) and its interfaces' addresses;
    ``note``: why a name may be missing (the resolver did not answer)."""

    names: frozenset
    addresses: frozenset
    note: Optional[str] = field(default=None, compare=False)

    @classmethod
    def of(cls, names: Iterable[str], addresses: Iterable[str], note: Optional[str] = None) -> "ThisMachine":
        return cls(frozenset(n.lower() for n in names if n), frozenset(a.split("%")[0] for a in addresses), note)

    @classmethod
    def here(cls) -> "ThisMachine":
        import psutil

        names, gave_up = host_names()
        return cls.of(names, [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                              if a.family in (socket.AF_INET, socket.AF_INET6)], gave_up)

    def is_host(self, host: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> bool:
        """``host`` (a name or an address) is this machine: one of its names or addresses, or a
        name that resolves (within ``timeout_s``) to one of them or to a loopback address."""
        own = {a for a in map(_address, self.addresses) if a is not None}
        literal = _address(host)
        if host.lower() in self.names or host.lower() == "localhost" or (literal is not None and literal in own):
            return True
        try:
            resolved = [_address(a) for _, a in resolve_name(host, timeout_s)]
        except OSError:
            return False  # a name this machine cannot resolve is not this machine
        # 0.0.0.0 / :: (every interface) is this machine too
        return any(a is not None and (a in own or a.is_loopback or a.is_unspecified) for a in resolved)

    def describe(self) -> str:
        said = f"{', '.join(sorted(self.names))}; {', '.join(sorted(self.addresses))}"
        return f"{said}; {self.note}" if self.note else said


def port_taken(port: int, host: str = "") -> Optional[str]:
    """Why ``port`` cannot be bound on ``host`` ("": every interface, as node 0's rendezvous
    store binds it), None where it is free. ``SO_REUSEADDR`` as the store sets it: a closed
    socket's TIME_WAIT owns nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
