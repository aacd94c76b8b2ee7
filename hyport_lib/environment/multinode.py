"""Stage 01 for a job of several hosts: the node settings as the user's launcher gives them
(stage 01's parameters first, then every node variable :mod:`hyport_lib.nodes.inputs` reads:
torchrun's ``PET_*``, LLaMA-Factory's ``NNODES`` / ``NODE_RANK`` / ``MASTER_ADDR`` /
``MASTER_PORT``, ModelArts' ``MA_NUM_HOSTS`` / ``VC_WORKER_NUM`` / ``VC_TASK_INDEX`` /
``VC_WORKER_HOSTS``; then ``nodes_from``'s DeepSpeed hostfile and the rank table), collected
as :class:`NodeFacts` and judged by the checks of :mod:`network`, :mod:`rank_table` and
:mod:`roce`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

from hyport_lib.environment.network import (TORCHRUN_DEFAULT_PORT, Interface, Peer, check_if_ip,
                                            check_master_port, check_peers, check_socket_ifname,
                                            collect_interfaces, local_addresses, resolve_peers)
from hyport_lib.environment.rank_table import (RankTableError, RankTableFacts, check_rank_table, rank_table_facts,
                                               read_rank_table)
from hyport_lib.environment.roce import RoceLink, check_roce_links, find_hccn_tool, query_links
from hyport_lib.nodes.addresses import RESOLVE_TIMEOUT_S, ThisMachine, host_names, resolve_name
from hyport_lib.nodes.inputs import (FROM_ENVIRONMENT, HostLine, NodeInputError, NodeValue, check_rank,
                                     environment_values, from_environment, hostfile_settings, read_hostfile,
                                     read_value)
from hyport_lib.results import Check
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted, plural

#: The settings stage 01 judges (its parameters of the same names).
NODE_FIELDS = ("nnodes", "node_rank", "master_addr", "master_port")


@dataclass
class NodeFacts:
    """What stage 01 records about this host's place in a job of several hosts."""

    host_name: str = ""
    host_name_note: Optional[str] = None  # the full name not looked up in time
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
        parts = [f"{self.nnodes or '?'} {plural('node', self.nnodes or 0)}"]
        if self.node_rank is not None:
            parts[0] += f", this one node {self.node_rank}"
        if self.master_addr:
            parts.append(f"master {self.master_addr}:{self.master_port}")
        return "; ".join(parts)


def node_values(environ: Mapping[str, str], given: Mapping[str, object],
                hostfile: Optional[tuple[str, list[HostLine]]] = None,
                machine: Optional[ThisMachine] = None) -> tuple[dict[str, list[NodeValue]], Optional[str]]:
    """Each setting's values, the first one used: the parameter (``given``, None = not given),
    every node variable set, then the hostfile's line of this machine and its first host.
    Also why the hostfile names no node here (None: it does, or there is none)."""
    values: dict[str, list[NodeValue]] = {key: [] for key in NODE_FIELDS}
    for key in NODE_FIELDS:
        if given.get(key) is not None:
            # read as the variables are (a problem names the parameter), said as "parameter"
            values[key].append(replace(read_value(key, key, str(given[key])), name="parameter"))
    for value in environment_values(environ):
        if value.field in values:
            values[value.field].append(value)
    problem = None
    if hostfile is not None:
        path, hosts = hostfile
        rank = given.get("node_rank")
        try:
            settings = hostfile_settings(path, hosts, environ, machine, rank if isinstance(rank, int) else 0)
            for key in ("node_rank", "master_addr"):
                values[key].append(NodeValue(key, settings.origins[key], str(getattr(settings, key)),
                                             getattr(settings, key)))
        except NodeInputError as exc:
            problem = str(exc)
    return values, problem


def addresses_of(name: str) -> tuple[set[str], Optional[str]]:
    """``name``'s addresses (an address: itself), or none and why: it does not resolve, or
    not within RESOLVE_TIMEOUT_S."""
    try:
        found = {address for _, address in resolve_name(name)}
    except OSError:
        return set(), f"{name} does not resolve"
    return found, None if found else f"{name} not resolved within {RESOLVE_TIMEOUT_S:g} s"


def _master_addr_problem(values: Sequence[NodeValue],
                         resolve: Callable[[str], tuple[set[str], Optional[str]]]) -> Optional[str]:
    """Where the master's address is said more than once, each must name the same host: the
    same text, or names that resolve to a shared address (``10.0.0.1`` and ``node0``)."""
    said = [v for v in values if v.problem is None and v.value]
    if len(said) < 2:
        return None
    found: dict[str, tuple[set[str], Optional[str]]] = {}

    def same(a: str, b: str) -> bool:
        if a.lower() == b.lower():
            return True
        for name in (a, b):
            if name not in found:
                found[name] = resolve(name)
        return bool(found[a][0] & found[b][0])

    apart = [v for v in said[1:] if not same(said[0].value, v.value)]
    if not apart:
        return None
    why = sorted({found[v.value][1] for v in [said[0], *apart] if v.value in found and found[v.value][1]})
    return ("master_addr disagrees: " + ", ".join(f"{v.name}={printable(str(v.value))}" for v in [said[0], *apart])
            + (f" ({'; '.join(why)})" if why else " (different hosts)"))


def check_node_settings(values: Mapping[str, Sequence[NodeValue]], hostfile_hosts: Optional[int],
                        rank_table_servers: Optional[int], refusals: Sequence[str] = (),
                        resolve: Callable[[str], tuple[set[str], Optional[str]]] = addresses_of) -> Check:
    """The settings read as numbers and agree with each other and with the hostfile and rank
    table (the master's names resolved with ``resolve``, bounded); ``refusals``: what else
    refuses them (train's reading of ``nodes_from``)."""
    name = "node_settings"
    if not any(values.values()) and hostfile_hosts is None and rank_table_servers is None and not refusals:
        return Check(name, "SKIP", "no node setting (NNODES, NODE_RANK, MASTER_ADDR, MA_NUM_HOSTS, "
                                   "VC_TASK_INDEX, a hostfile or a rank table): a one-host job")
    problems = []
    for key in ("nnodes", "node_rank", "master_port"):
        problems += [v.problem for v in values[key] if v.problem]
        read = {v.name: v.value for v in values[key] if v.problem is None}
        if len(set(read.values())) > 1:
            problems.append(f"{key} disagrees: " + ", ".join(f"{src}={printable(str(v))}" for src, v in read.items()))
    problems += [v.problem for v in values["master_addr"] if v.problem]
    master_apart = _master_addr_problem(values["master_addr"], resolve)
    problems += [master_apart] if master_apart else []
    first = {key: next(iter(values[key]), None) for key in NODE_FIELDS}
    nnodes = first["nnodes"].value if first["nnodes"] else None
    counts = {"the hostfile": hostfile_hosts, "the rank table": rank_table_servers}
    for where, count in counts.items():
        if count is not None and nnodes is not None and count != nnodes:
            problems.append(f"{first['nnodes'].name}={nnodes} but {where} names {counted(count, 'host')}")
    count_said = f"{first['nnodes'].name}={nnodes}" if nnodes is not None else None
    if nnodes is None:
        nnodes = next((c for c in counts.values() if c is not None), None)
        count_said = (f"{'the hostfile' if hostfile_hosts is not None else 'the rank table'}'s "
                      f"{counted(nnodes, 'host') if nnodes is not None else 'hosts'}")
    rank = first["node_rank"].value if first["node_rank"] else None
    if rank is not None and nnodes is not None:
        try:
            check_rank(first["node_rank"].name, rank, count_said, nnodes)
        except NodeInputError as exc:
            problems.append(str(exc))
    problems += [r for r in refusals if r not in problems]
    if problems:
        return Check(name, "FAIL", "; ".join(problems))
    said = [f"{counted(nnodes, 'node') if nnodes else '? nodes'} "
            f"({first['nnodes'].name if first['nnodes'] else 'hostfile / rank table'})"]
    if rank is not None:
        said.append(f"this is node {rank} ({first['node_rank'].name})")
    if first["master_addr"] and first["master_addr"].value:
        said.append(f"master {first['master_addr'].value} ({first['master_addr'].name})")
    return Check(name, "PASS", ", ".join(said))


def collect_node_facts(environ: Mapping[str, str], given: Mapping[str, object], nodes_from: Optional[str],
                       kind: str, cards: Sequence[int]) -> tuple[NodeFacts, list[Check]]:
    """The facts, and the checks in display order (every one judged on every backend).
    ``nodes_from`` as train reads it: "env" adds train's refusal of the variables to the
    node_settings check; a hostfile's path adds its hosts."""
    interfaces = collect_interfaces()
    addresses, (names, gave_up) = local_addresses(interfaces), host_names()
    machine = ThisMachine.of(names, addresses, gave_up)
    by_environment = nodes_from is not None and nodes_from.strip().lower() == FROM_ENVIRONMENT
    hostfile = nodes_from if nodes_from is not None and not by_environment else None
    facts = NodeFacts(host_name=names[0] if names else "", host_name_note=gave_up, interfaces=interfaces,
                      hostfile=hostfile)
    checks: list[Check] = []

    table_path = environ.get("RANK_TABLE_FILE", "").strip()
    table = None
    if table_path:
        try:
            table = read_rank_table(table_path)
            error = None
        except RankTableError as exc:
            error = str(exc)
        facts.rank_table = rank_table_facts(table, error, table_path, addresses, names, environ.get("RANK_ID"))

    hosts: list[HostLine] = []
    refusals = []
    if hostfile:
        try:
            hosts = read_hostfile(hostfile)
        except NodeInputError as exc:
            refusals.append(str(exc))
    values, not_here = node_values(environ, given, (hostfile, hosts) if hosts else None, machine)
    refusals += [not_here] if not_here else []
    if by_environment:
        try:
            from_environment(environ)
        except NodeInputError as exc:
            refusals.append(str(exc))
    checks.append(check_node_settings(values, len(hosts) if hosts else None,
                                      len(table.servers) if table else None, refusals))
    first = {key: next((v for v in values[key] if v.problem is None), None) for key in NODE_FIELDS}
    facts.nnodes = (first["nnodes"].value if first["nnodes"] else None) or (len(hosts) or None) or (
        len(table.servers) if table else None)
    facts.node_rank = first["node_rank"].value if first["node_rank"] else None
    facts.master_addr = first["master_addr"].value if first["master_addr"] else None
    port_said = next(iter(values["master_port"]), None)
    facts.master_port = port_said.value if port_said else (TORCHRUN_DEFAULT_PORT if facts.master_addr else None)
    facts.sources = {k: v.name for k, v in first.items() if v}
    if port_said:
        facts.sources["master_port"] = port_said.name
    elif facts.master_addr:
        facts.sources["master_port"] = "torchrun's default"

    checks.append(check_socket_ifname(kind, environ, interfaces, facts.multinode))
    checks.append(check_if_ip(environ, interfaces))

    facts.hccn_tool = find_hccn_tool(environ)
    own_cards = list(cards) or [int(d) for d in (facts.rank_table.this_device_ips if facts.rank_table else {})]
    # One host's cards talk over HCCS, not RoCE: the links are asked about only for a job of
    # several hosts (a rank table names one).
    if facts.hccn_tool and own_cards and (facts.multinode or facts.rank_table is not None):
        facts.roce_links = query_links(facts.hccn_tool, own_cards)
    if table is not None and facts.rank_table.this_server is None and facts.roce_links:
        # a table of labels: this host's server is the one holding its cards' RoCE addresses
        facts.rank_table = rank_table_facts(table, None, table_path, addresses, names, environ.get("RANK_ID"),
                                            {link.card: link.ip for link in facts.roce_links if link.ip})
    checks.append(check_rank_table(facts.rank_table, addresses, facts.host_name))
    if facts.roce_links or not facts.hccn_tool or not own_cards:
        checks.append(check_roce_links(kind, facts.hccn_tool, own_cards, facts.roce_links, facts.multinode,
                                       facts.rank_table.this_device_ips if facts.rank_table else None))
    else:
        checks.append(Check("roce_links", "SKIP", "one host: HCCL does not use the RoCE links between its "
                                                  "cards (set NNODES or RANK_TABLE_FILE to check them)"))

    if facts.master_addr:
        port_from = (f"{facts.sources['master_port']}" if port_said is None
                     else f"{port_said.name}={printable(port_said.text)}")
        checks.append(check_master_port(facts.master_addr, facts.master_port, port_from, facts.node_rank,
                                        machine.is_host(facts.master_addr)))
    else:
        checks.append(check_master_port(None, None, "", facts.node_rank, False))

    hostfile_peers = [Peer(printable(h.host), f"hostfile line {h.number}") for h in hosts]
    facts.peers = resolve_peers(_peers(hostfile_peers, table, environ, facts.master_addr, facts.sources))
    checks.append(check_peers(facts.peers))
    return facts, checks


def _peers(hostfile_peers: list[Peer], table, environ: Mapping[str, str], master_addr: Optional[str],
           sources: Mapping[str, str]) -> list[Peer]:
    """Each name once, with the first place it was found."""
    found = list(hostfile_peers)
    if table is not None:
        # a server known by a label only (CANN's node_0) has no name to resolve
        found += [Peer(s.address, f"rank table server {s.server_id}") for s in table.servers if s.address]
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

    rows = [("host name", (nodes.host_name or "unknown") + (f" ({nodes.host_name_note})" if nodes.host_name_note
                                                            else "")),
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
        this = (table.this_server + (f" (by {table.found_by})" if table.found_by else "")
                if table.this_server else "not known")
        rows.append(("rank table", table.error or f"{table.path}: version {table.version}, "
                                                  f"{counted(table.servers, 'server')}, {counted(table.ranks, 'rank')}, "
                                                  f"this host {this}"))
    for peer in nodes.peers:
        rows.append((f"peer {peer.name}", f"{', '.join(peer.addresses) or peer.error} ({peer.source})"))
    for link in nodes.roce_links:
        rows.append((f"RoCE card {link.card}", link.error or f"link {link.link}, {link.ip or 'no IP'}"
                                                             + (f"/{link.netmask}" if link.netmask else "")))
    for interface in nodes.interfaces:
        state = "" if interface.up is None else (" up" if interface.up else " down")
        rows.append((f"interface {interface.name}", f"{', '.join(interface.addresses) or 'no address'}{state}"))
    return rows
