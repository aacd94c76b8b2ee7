"""Where the ranks meet: the master address and the rendezvous port, checked before
torchrun starts (an address that does not resolve makes torchrun retry for ever; a taken
port fails every rank)."""

from __future__ import annotations

import socket


def check_master_addr(params) -> None:
    try:
        socket.getaddrinfo(params.master_addr, None)
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"master_addr={params.master_addr!r} does not resolve ({exc}); give the "
                         f"master node's address or name") from None
    if params.nnodes == 1 and not is_local(params.master_addr):
        raise ValueError(f"master_addr={params.master_addr!r} is not this machine, but nnodes=1: "
                         f"a single-node run is its own master (e.g. 127.0.0.1)")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def rendezvous_port(params, check: bool) -> int:
    if params.master_port == 0:  # one node only (Params refuses 0 with nnodes > 1)
        return free_port(_bind_host(params.master_addr))
    if check and params.node_rank == 0 and is_local(params.master_addr):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((_bind_host(params.master_addr), params.master_port))
            except OSError:
                raise ValueError(f"master_port={params.master_port} is already taken on "
                                 f"{params.master_addr} (another job?); choose another port or "
                                 "master_port=0 for a free one") from None
    return params.master_port


def _bind_host(addr: str) -> str:
    if addr in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(addr)  # the master binds that address
    except OSError:
        return "0.0.0.0"


def is_local(addr: str) -> bool:
    """Is ``addr`` this machine (loopback, unspecified, its name, one of its interfaces' addresses)?"""
    import ipaddress

    if addr in ("localhost", socket.gethostname()):
        return True
    try:
        resolved = {info[4][0].split("%")[0] for info in socket.getaddrinfo(addr, None)}
    except (OSError, UnicodeError):
        return False
    import psutil

    mine = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    for address in resolved:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue
        if ip.is_loopback or ip.is_unspecified or address in mine:
            return True
    return False
