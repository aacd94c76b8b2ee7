"""Ascend's rank table (``RANK_TABLE_FILE``, the ``hccl.json`` Ascend Operator and MindCluster
write): read bounded, checked entry by entry, and whether it names this host.

The format (CANN's HCCL guide, "rank table"): ``version`` ``"1.0"`` (Atlas training, A2) or
``"1.2"`` (A3 SuperPoD, each device with a ``super_device_id``), ``status`` ``"completed"``
once usable (``"initializing"`` while Ascend Operator still writes it), ``server_count`` and
``server_list``: each server a ``server_id``, optionally ``host_ip`` / ``container_ip``, and
its ``device`` list of ``device_id``, ``device_ip``, ``rank_id`` (strings of numbers, as the
tools write them).

``server_id`` is any globally unique string: Ascend Operator and MindCluster write the host's
address, CANN's own template a label (``node_0``, hcclug_000067, "rank table configuration").
Only an id that is an address or a host name names a host (is matched and resolved); a server
with a label and no ``host_ip`` / ``container_ip`` is found as this host's by ``RANK_ID`` (the
rank of a process started here) or by this host's cards' RoCE addresses (``device_ip``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from hyport_lib.results import Check
from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted

#: A 1 000-server table is about 1 MB; more than this is not a rank table.
MAX_RANK_TABLE_BYTES = 16 << 20
VERSIONS = ("1.0", "1.2")
#: One label of a DNS host name (RFC 1123): letters, digits and hyphens, no hyphen at either end.
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


class RankTableError(ValueError):
    """One line naming the file, the entry and what is wrong with it."""


@dataclass
class RankDevice:
    device_id: int
    rank_id: int
    device_ip: Optional[str] = None
    super_device_id: Optional[str] = None


@dataclass
class RankServer:
    server_id: str
    host_ip: Optional[str] = None
    container_ip: Optional[str] = None
    devices: list[RankDevice] = field(default_factory=list)

    def names(self) -> list[str]:
        """What names the server's host: its id where that is an address or a host name, its
        host and container address."""
        own_id = self.server_id if names_a_host(self.server_id) else None
        return [n for n in (own_id, self.host_ip, self.container_ip) if n]

    @property
    def address(self) -> Optional[str]:
        """The name a peer resolves: the host address, else the id or the container address
        (None: the server is known by a label only)."""
        return next(iter(self.names()), None)


@dataclass
class RankTable:
    path: str
    version: str
    status: Optional[str]
    servers: list[RankServer] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return sum(len(s.devices) for s in self.servers)

    def server_naming(self, addresses: Iterable[str], host_names: Iterable[str]) -> Optional[RankServer]:
        """The server whose id or address is one of ``addresses`` / ``host_names`` (this host's)."""
        own = {_normal_address(a) for a in addresses} | {n.lower() for n in host_names if n}
        return next((s for s in self.servers
                     if any(_normal_address(n) in own or n.lower() in own for n in s.names())), None)

    def unnamed(self) -> list[RankServer]:
        """The servers no name matches: a label for an id, no host or container address."""
        return [s for s in self.servers if not s.names()]


def names_a_host(server_id: str) -> bool:
    """An IP address, or a host name as DNS allows it (``worker-0.job``); not a label such as
    CANN's ``node_0`` (an underscore) or a bare number."""
    if _is_address(server_id):
        return True
    labels = server_id.rstrip(".").split(".")
    return (len(server_id) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)
            and not labels[-1].isdigit())


@dataclass
class RankTableFacts:
    """What the report keeps of the rank table: enough to read, never the whole file."""

    path: str = ""
    version: Optional[str] = None
    servers: int = 0
    ranks: int = 0
    this_server: Optional[str] = None  # this host's server_id
    found_by: Optional[str] = None  # how: "its name", "RANK_ID=2", "card 0's device_ip 192.168.1.8"
    unnamed: list[str] = field(default_factory=list)  # server_ids that are labels, without an address
    conflict: Optional[str] = None  # RANK_ID and the cards' device_ip name different servers
    this_ranks: list[int] = field(default_factory=list)
    this_device_ips: dict[str, str] = field(default_factory=dict)  # device_id -> device_ip
    error: Optional[str] = None


def read_rank_table(path: str) -> RankTable:
    try:
        text = read_text(path, MAX_RANK_TABLE_BYTES, errors="strict")
    except UnicodeDecodeError as exc:
        raise RankTableError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except UnreadableFile as exc:
        raise RankTableError(f"{path}: cannot be read: {exc.reason}") from None
    return parse_rank_table(text, path)


def parse_rank_table(text: str, path: str) -> RankTable:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RankTableError(f"{path}: not JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise RankTableError(f"{path}: not JSON a rank table could be: nested too deep") from None
    if not isinstance(raw, dict):
        raise RankTableError(f"{path}: a JSON {type(raw).__name__}, not the rank table's object")
    # The status first: the file Ascend Operator starts with is {"status": "initializing"} alone.
    status = raw.get("status")
    if status is not None and status != "completed":
        raise RankTableError(f"{path}: status {printable(str(status))!r}, not 'completed': the table is "
                             "not ready (Ascend Operator writes it while the job's pods start)")
    version = _text(raw, "version", path, "the table")
    if version not in VERSIONS:
        raise RankTableError(f"{path}: version {version!r}: hyport knows {' and '.join(VERSIONS)}")
    servers_raw = raw.get("server_list")
    if not isinstance(servers_raw, list) or not servers_raw:
        raise RankTableError(f"{path}: no server_list (a list of servers) in the table")
    servers = [_server(entry, i, path, version) for i, entry in enumerate(servers_raw)]
    table = RankTable(path, version, status, servers)
    _check_whole(table, raw, path)
    return table


def _server(entry, i: int, path: str, version: str) -> RankServer:
    where = f"server_list[{i}]"
    if not isinstance(entry, dict):
        raise RankTableError(f"{path}: {where}: not an object")
    server = RankServer(_text(entry, "server_id", path, where),
                        _address(entry, "host_ip", path, where), _address(entry, "container_ip", path, where))
    where = f"{where} (server_id {server.server_id})"
    devices = entry.get("device")
    if not isinstance(devices, list) or not devices:
        raise RankTableError(f"{path}: {where}: no device list")
    for j, device in enumerate(devices):
        at = f"{where}.device[{j}]"
        if not isinstance(device, dict):
            raise RankTableError(f"{path}: {at}: not an object")
        ip = _address(device, "device_ip", path, at)
        if ip is None and version == "1.0":
            raise RankTableError(f"{path}: {at}: no device_ip")
        super_id = device.get("super_device_id")
        if version == "1.2" and not (isinstance(super_id, str) and super_id.strip()):
            raise RankTableError(f"{path}: {at}: no super_device_id (version 1.2 needs one per device)")
        server.devices.append(RankDevice(_number(device, "device_id", path, at), _number(device, "rank_id", path, at),
                                         ip, super_id))
    ids = [d.device_id for d in server.devices]
    twice = sorted({d for d in ids if ids.count(d) > 1})
    if twice:
        raise RankTableError(f"{path}: {where}: device_id {twice[0]} listed twice")
    return server


def _check_whole(table: RankTable, raw: dict, path: str) -> None:
    count = raw.get("server_count")
    if count is not None and str(count).strip() != str(len(table.servers)):
        raise RankTableError(f"{path}: server_count {printable(str(count))!r} but server_list has "
                             f"{counted(len(table.servers), 'server')}")
    ids = [s.server_id for s in table.servers]
    twice = next((s for s in ids if ids.count(s) > 1), None)
    if twice is not None:
        raise RankTableError(f"{path}: server_id {twice} listed twice")
    ranks = sorted(d.rank_id for s in table.servers for d in s.devices)
    if ranks != list(range(len(ranks))):
        seen, gap = set(), None
        for r in ranks:
            if r in seen:
                gap = f"rank_id {r} listed twice"
                break
            seen.add(r)
        gap = gap or f"rank_id {min(set(range(len(ranks))) - seen)} missing"
        raise RankTableError(f"{path}: the ranks must be 0..{len(ranks) - 1}, once each: {gap}")
    if table.version == "1.2" and "super_pod_list" in raw:
        pods = raw["super_pod_list"]
        if not isinstance(pods, list):
            raise RankTableError(f"{path}: super_pod_list is not a list")
        for k, pod in enumerate(pods):
            if not isinstance(pod, dict) or not isinstance(pod.get("super_pod_id"), str):
                raise RankTableError(f"{path}: super_pod_list[{k}]: no super_pod_id")
            for member in pod.get("server_list") or []:
                member_id = member.get("server_id") if isinstance(member, dict) else None
                if member_id not in ids:
                    raise RankTableError(f"{path}: super_pod_list[{k}]: server_id {member_id!r} is not "
                                         "in server_list")


def _text(entry: dict, key: str, path: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RankTableError(f"{path}: {where}: no {key}" + ("" if value is None else f" (got {value!r})"))
    return printable(value.strip())


def _number(entry: dict, key: str, path: str, where: str) -> int:
    value = entry.get(key)
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not text.isdigit():
        raise RankTableError(f"{path}: {where}: {key} {value!r} is not a number" if value is not None
                             else f"{path}: {where}: no {key}")
    return int(text)


def _address(entry: dict, key: str, path: str, where: str) -> Optional[str]:
    value = entry.get(key)
    if value in (None, ""):
        return None
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        raise RankTableError(f"{path}: {where}: {key} {printable(str(value))!r} is not an IP address") from None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


def _normal_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.split("%")[0]))
    except ValueError:
        return text.lower()


def rank_table_facts(table: Optional[RankTable], error: Optional[str], path: str,
                     addresses: Iterable[str], host_names: Iterable[str], rank_id: Optional[str] = None,
                     card_ips: Optional[Mapping[int, str]] = None) -> RankTableFacts:
    """This host's server: the one a name of this host names; else, among the servers known by
    a label only, the one holding rank ``rank_id`` (``RANK_ID``) or the RoCE addresses of this
    host's cards (``card_ips``, card -> its IP as hccn_tool gives it)."""
    if table is None:
        return RankTableFacts(path=path, error=error)
    facts = RankTableFacts(path, table.version, len(table.servers), table.ranks,
                           unnamed=[s.server_id for s in table.unnamed()])
    mine, found_by = table.server_naming(addresses, host_names), "its name"
    if mine is None:
        by_rank = _by_rank(table, rank_id)
        by_card = _by_card(table, card_ips or {})
        if by_rank and by_card and by_rank[0] is not by_card[0]:
            facts.conflict = (f"{by_rank[1]} is server {by_rank[0].server_id}'s but {by_card[1]} is server "
                              f"{by_card[0].server_id}'s")
            return facts
        mine, found_by = by_rank or by_card or (None, None)
    if mine is not None:
        facts.this_server, facts.found_by = mine.server_id, found_by
        facts.this_ranks = sorted(d.rank_id for d in mine.devices)
        facts.this_device_ips = {str(d.device_id): d.device_ip for d in mine.devices if d.device_ip}
    return facts


def _by_rank(table: RankTable, rank_id: Optional[str]) -> Optional[tuple[RankServer, str]]:
    text = (rank_id or "").strip()
    if not text.isdigit():
        return None
    return next(((s, f"RANK_ID={text}") for s in table.unnamed() if any(d.rank_id == int(text) for d in s.devices)),
                None)


def _by_card(table: RankTable, card_ips: Mapping[int, str]) -> Optional[tuple[RankServer, str]]:
    """The one label-only server holding a device_ip of this host's cards."""
    found = [(s, f"card {card}'s device_ip {ip}") for card, ip in sorted(card_ips.items()) for s in table.unnamed()
             if ip and any(d.device_ip and _normal_address(d.device_ip) == _normal_address(ip) for d in s.devices)]
    return found[0] if len({id(s) for s, _ in found}) == 1 else None


def check_rank_table(facts: Optional[RankTableFacts], addresses: Iterable[str], host_name: str) -> Check:
    """SKIP without RANK_TABLE_FILE (torchrun's rendezvous needs none); FAIL for a table that
    does not parse or names every server by address and none as this host; WARN where servers
    are known by a label only and nothing tells which is this host."""
    name = "rank_table"
    if facts is None:
        return Check(name, "SKIP", "RANK_TABLE_FILE unset: torchrun's rendezvous needs no rank table")
    if facts.error:
        return Check(name, "FAIL", f"RANK_TABLE_FILE: {facts.error}")
    if facts.conflict:
        return Check(name, "FAIL", f"RANK_TABLE_FILE {facts.path}: {facts.conflict}: which server is this host?")
    if facts.this_server is None:
        shown = ", ".join(sorted(set(addresses))) or "none"
        if facts.unnamed:
            labels = ", ".join(facts.unnamed[:4]) + (" ..." if len(facts.unnamed) > 4 else "")
            what = "is a label" if len(facts.unnamed) == 1 else "are labels"
            return Check(name, "WARN", f"RANK_TABLE_FILE {facts.path}: no server names this host ({host_name}; "
                                       f"addresses {shown}), and server_id {labels} {what} with no host_ip: "
                                       "cannot tell which server is this host (set RANK_ID to a rank of this "
                                       "host, or let hccn_tool give its cards' device_ip)")
        return Check(name, "FAIL", f"RANK_TABLE_FILE {facts.path}: no server_list entry names this host "
                                   f"({host_name}; addresses {shown}) by server_id, host_ip or container_ip")
    ranks = facts.this_ranks
    span = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
    how = "" if facts.found_by in (None, "its name") else f", by {facts.found_by}"
    return Check(name, "PASS", f"{facts.path}: version {facts.version}, {counted(facts.servers, 'server')}, "
                               f"{counted(facts.ranks, 'rank')}; this host is server {facts.this_server} "
                               f"({span}{how})")
