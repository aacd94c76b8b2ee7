"""Stage 01 for a job of several hosts: the node settings as the user's launcher gives them
(stage 01's parameters first, then torchrun's and LLaMA-Factory's ``NNODES`` / ``NODE_RANK`` /
``MASTER_ADDR`` / ``MASTER_PORT``, torchrun's ``PET_*``, ModelArts' ``MA_NUM_HOSTS`` /
``VC_WORKER_NUM`` / ``VC_TASK_INDEX`` / ``VC_WORKER_HOSTS``, a DeepSpeed hostfile, the rank
table), collected as :class:`NodeFacts` and judged by the checks of :mod:`network`,
:mod:`rank_table` and :mod:`roce`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from hyport_lib.environment.network import (TORCHRUN_DEFAULT_PORT, Interface, Peer, check_if_ip,
                                            check_master_port, check_peers, check_socket_ifname,
                                            collect_interfaces, host_names, local_addresses, resolve_peers,
                                            resolve_name)
from hyport_lib.environment.rank_table import (RankTableError, RankTableFacts, check_rank_table, rank_table_facts,
                                               read_rank_table)
from hyport_lib.environment.roce import RoceLink, check_roce_links, find_hccn_tool, query_links
from hyport_lib.results import Check
from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.printable import printable

#: The variables each setting is read from, in order (the first set one is used).
SETTING_VARIABLES = {
    "nnodes": ("NNODES", "PET_NNODES", "MA_NUM_HOSTS", "VC_WORKER_NUM"),
    "node_rank": ("NODE_RANK", "PET_NODE_RANK", "VC_TASK_INDEX"),
    "master_addr": ("MASTER_ADDR", "PET_MASTER_ADDR"),
    "master_port": ("MASTER_PORT", "PET_MASTER_PORT"),
}
MAX_HOSTFILE_BYTES = 1 << 20


@dataclass
class Setting:
    """One node setting: its value, where it came from, and every other source's value."""

    value: Optional[str] = None
    source: Optional[str] = None
    others: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeFacts:
    """What stage 01 records about this host's place in a job of several hosts."""

    host_name: str = ""
    interfaces: list[Interface] = field(default_factory=list)
    nnodes: Optional[int] = None
    node_rank: Optional[int] = None
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    sources: dict[str, str] = field(default_factory=dict)  # setting -> "NNODES" / "parameter" / ...
    hostfile: Optional[str] = None
    peers: list[Peer] = field(default_factory=list)
    rank_table: Optional[RankTableFacts] = None
    hccn_tool: Optional[str] = None
    roce_links: list[RoceLink] = field(default_factory=list)

    @property
    def multinode(self) -> bool:
        return bool(self.nnodes and self.nnodes > 1)

    @property
    def line(self) -> str:
        """``2 nodes, this one node 1 (NODE_RANK); master 10.0.0.1:29500`` ("" for one host)."""
        if not self.nnodes and not self.master_addr:
            return ""
        parts = [f"{self.nnodes or '?'} node{'s' if (self.nnodes or 0) != 1 else ''}"]
        if self.node_rank is not None:
            parts[0] += f", this one node {self.node_rank}"
        if self.master_addr:
            parts.append(f"master {self.master_addr}:{self.master_port}")
        return "; ".join(parts)


def node_settings(environ: Mapping[str, str], given: Mapping[str, object]) -> dict[str, Setting]:
    """Each setting from the parameters (``given``, None = not given), then the variables;
    ModelArts' master is the first of VC_WORKER_HOSTS (as its documentation derives it)."""
    settings = {}
    for name, variables in SETTING_VARIABLES.items():
        found = [(v, environ[v].strip()) for v in variables if environ.get(v, "").strip()]
        if name == "master_addr" and environ.get("VC_WORKER_HOSTS", "").strip():
            found.append(("VC_WORKER_HOSTS", environ["VC_WORKER_HOSTS"].split(",")[0].strip()))
        if given.get(name) is not None:
            found.insert(0, ("parameter", str(given[name])))
        setting = Setting(value=found[0][1], source=found[0][0]) if found else Setting()
        setting.others = {source: value for source, value in found[1:]}
        settings[name] = setting
    return settings


def _number(text: Optional[str]) -> Optional[int]:
    """``4``, or torchrun's elastic ``2:4`` (its most); None for anything else."""
    if text is None:
        return None
    last = text.rsplit(":", 1)[-1].strip()
    return int(last) if last.isdigit() else None


def read_hostfile(path: str) -> list[Peer]:
    """DeepSpeed's hostfile: ``host slots=N`` a line, ``#`` comments. ValueError naming the
    file and line."""
    try:
        text = read_text(path, MAX_HOSTFILE_BYTES)
    except UnreadableFile as exc:
        raise ValueError(f"hostfile {exc}") from None
    peers = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if any(not w.startswith("slots=") or not w[6:].isdigit() for w in words[1:]):
            raise ValueError(f"hostfile {path} line {number}: {printable(line.strip())!r} is not 'HOST slots=N'")
        peers.append(Peer(printable(words[0]), f"hostfile line {number}"))
    if not peers:
        raise ValueError(f"hostfile {path}: names no host")
    return peers


def check_node_settings(settings: Mapping[str, Setting], hostfile_hosts: Optional[int],
                        rank_table_servers: Optional[int]) -> Check:
    """The settings read as numbers and agree with each other and with the hostfile and rank table."""
    name = "node_settings"
    if not any(s.value for s in settings.values()) and hostfile_hosts is None and rank_table_servers is None:
        return Check(name, "SKIP", "no node setting (NNODES, NODE_RANK, MASTER_ADDR, MA_NUM_HOSTS, "
                                   "VC_TASK_INDEX, a hostfile or a rank table): a one-host job")
    problems = []
    for key in ("nnodes", "node_rank", "master_port"):
        s = settings[key]
        for source, value in ((s.source, s.value), *s.others.items()):
            if value is not None and _number(value) is None:
                problems.append(f"{source}={printable(value)!r} is not a number")
        values = {src: _number(v) for src, v in ((s.source, s.value), *s.others.items()) if v is not None}
        if len(set(values.values())) > 1:
            problems.append(f"{key} disagrees: " + ", ".join(f"{src}={v}" for src, v in values.items()))
    nnodes = _number(settings["nnodes"].value)
    counts = {"the hostfile": hostfile_hosts, "the rank table": rank_table_servers}
    for where, count in counts.items():
        if count is not None and nnodes is not None and count != nnodes:
            problems.append(f"{settings['nnodes'].source}={nnodes} but {where} names {count} hosts")
    nnodes = nnodes or next((c for c in counts.values() if c is not None), None)
    rank = _number(settings["node_rank"].value)
    if rank is not None and nnodes is not None and rank >= nnodes:
        problems.append(f"{settings['node_rank'].source}={rank}: must be below nnodes={nnodes}")
    port = _number(settings["master_port"].value)
    if port is not None and not 1 <= port <= 65535:
        problems.append(f"{settings['master_port'].source}={port} is not a port (1-65535)")
    if problems:
        return Check(name, "FAIL", "; ".join(problems))
    said = [f"{nnodes or '?'} nodes ({settings['nnodes'].source or 'hostfile / rank table'})"]
    if rank is not None:
        said.append(f"this is node {rank} ({settings['node_rank'].source})")
    if settings["master_addr"].value:
        said.append(f"master {settings['master_addr'].value} ({settings['master_addr'].source})")
    return Check(name, "PASS", ", ".join(said))


def _is_local(name: str, addresses: Sequence[str], names: Sequence[str]) -> bool:
    """``name`` is this host: one of its names, or it resolves to one of its addresses."""
    if name.lower() in {n.lower() for n in names} or name == "localhost":
        return True
    try:
        own = {ipaddress.ip_address(a) for a in addresses}
        return any(ipaddress.ip_address(a) in own or ipaddress.ip_address(a).is_loopback
                   for _, a in resolve_name(name, 5.0))
    except (OSError, ValueError):  # a name that does not resolve is not this host; master_port says so
        return False


def collect_node_facts(environ: Mapping[str, str], given: Mapping[str, object], hostfile: Optional[str],
                       kind: str, cards: Sequence[int]) -> tuple[NodeFacts, list[Check]]:
    """The facts, and the checks in display order (every one judged on every backend)."""
    interfaces = collect_interfaces()
    addresses, names = local_addresses(interfaces), host_names()
    facts = NodeFacts(host_name=names[0] if names else "", interfaces=interfaces, hostfile=hostfile)
    checks: list[Check] = []

    table_path = environ.get("RANK_TABLE_FILE", "").strip()
    table = None
    if table_path:
        try:
            table = read_rank_table(table_path)
            error = None
        except RankTableError as exc:
            error = str(exc)
        facts.rank_table = rank_table_facts(table, error, table_path, addresses, names)

    hostfile_peers: list[Peer] = []
    hostfile_problem = None
    if hostfile:
        try:
            hostfile_peers = read_hostfile(hostfile)
        except ValueError as exc:
            hostfile_problem = str(exc)

    settings = node_settings(environ, given)
    node_check = check_node_settings(settings, len(hostfile_peers) if hostfile_peers else None,
                                     len(table.servers) if table else None)
    if hostfile_problem:
        node_check = Check(node_check.name, "FAIL", hostfile_problem)
    checks.append(node_check)
    facts.nnodes = _number(settings["nnodes"].value) or (len(hostfile_peers) or None) or (
        len(table.servers) if table else None)
    facts.node_rank = _number(settings["node_rank"].value)
    facts.master_addr = settings["master_addr"].value
    port_text = settings["master_port"].value
    facts.master_port = _number(port_text) if port_text else (TORCHRUN_DEFAULT_PORT if facts.master_addr else None)
    facts.sources = {k: s.source for k, s in settings.items() if s.source}
    if facts.master_addr and not port_text:
        facts.sources["master_port"] = "torchrun's default"

    checks.append(check_socket_ifname(kind, environ, interfaces, facts.multinode))
    checks.append(check_if_ip(environ, interfaces))
    checks.append(check_rank_table(facts.rank_table, addresses, facts.host_name))

    facts.hccn_tool = find_hccn_tool(environ)
    own_cards = list(cards) or [int(d) for d in (facts.rank_table.this_device_ips if facts.rank_table else {})]
    # One host's cards talk over HCCS, not RoCE: the links are asked about only for a job of
    # several hosts (a rank table names one).
    if facts.hccn_tool and own_cards and (facts.multinode or facts.rank_table is not None):
        facts.roce_links = query_links(facts.hccn_tool, own_cards)
    if facts.roce_links or not facts.hccn_tool or not own_cards:
        checks.append(check_roce_links(kind, facts.hccn_tool, own_cards, facts.roce_links, facts.multinode,
                                       facts.rank_table.this_device_ips if facts.rank_table else None))
    else:
        checks.append(Check("roce_links", "SKIP", "one host: HCCL does not use the RoCE links between its "
                                                  "cards (set NNODES or RANK_TABLE_FILE to check them)"))

    if facts.master_addr:
        port_from = (f"{facts.sources['master_port']}" if port_text is None
                     else f"{facts.sources['master_port']}={printable(port_text)}")
        master_port = facts.master_port if facts.master_port and 1 <= facts.master_port <= 65535 else None
        checks.append(check_master_port(facts.master_addr, master_port, port_from, facts.node_rank,
                                        _is_local(facts.master_addr, addresses, names)))
    else:
        checks.append(check_master_port(None, None, "", facts.node_rank, False))

    facts.peers = resolve_peers(_peers(hostfile_peers, table, environ, facts.master_addr, facts.sources))
    checks.append(check_peers(facts.peers))
    return facts, checks


def _peers(hostfile_peers: list[Peer], table, environ: Mapping[str, str], master_addr: Optional[str],
           sources: Mapping[str, str]) -> list[Peer]:
    """Each name once, with the first place it was found."""
    found = list(hostfile_peers)
    if table is not None:
        found += [Peer(s.address, f"rank table server {s.server_id}") for s in table.servers]
    found += [Peer(h.strip(), "VC_WORKER_HOSTS") for h in environ.get("VC_WORKER_HOSTS", "").split(",") if h.strip()]
    if master_addr:
        found.append(Peer(master_addr, sources.get("master_addr", "MASTER_ADDR")))
    unique: dict[str, Peer] = {}
    for peer in found:
        unique.setdefault(peer.name, peer)
    return list(unique.values())



def node_rows(nodes: Optional[NodeFacts]) -> list[tuple[str, str]]:
    """The report's ``Nodes`` section as (fact, value) rows."""
    if nodes is None:
        return [("nodes", "not collected")]

    def said(key: str) -> str:
        return f" ({nodes.sources[key]})" if key in nodes.sources else ""

    rows = [("host name", nodes.host_name or "unknown"),
            ("nodes", f"{nodes.nnodes}{said('nnodes')}" if nodes.nnodes else "one host (no node setting)")]
    if nodes.node_rank is not None:
        rows.append(("node rank", f"{nodes.node_rank}{said('node_rank')}"))
    if nodes.master_addr:
        rows.append(("master", f"{nodes.master_addr}:{nodes.master_port} ({nodes.sources.get('master_addr')}, "
                               f"{nodes.sources.get('master_port')})"))
    if nodes.hostfile:
        rows.append(("hostfile", nodes.hostfile))
    table = nodes.rank_table
    if table is not None:
        rows.append(("rank table", table.error or f"{table.path}: version {table.version}, {table.servers} servers, "
                                                  f"{table.ranks} ranks, this host {table.this_server or 'not named'}"))
    for peer in nodes.peers:
        rows.append((f"peer {peer.name}", f"{', '.join(peer.addresses) or peer.error} ({peer.source})"))
    for link in nodes.roce_links:
        rows.append((f"RoCE card {link.card}", link.error or f"link {link.link}, {link.ip or 'no IP'}"
                                                             + (f"/{link.netmask}" if link.netmask else "")))
    for interface in nodes.interfaces:
        state = "" if interface.up is None else (" up" if interface.up else " down")
        rows.append((f"interface {interface.name}", f"{', '.join(interface.addresses) or 'no address'}{state}"))
    return rows
