"""Node parameters read from what users already have (train parameter ``nodes_from``): the
environment a launcher or a platform sets, or a DeepSpeed hostfile.

``nodes_from="env"`` reads the first of these sources that is set, in this order (a later one
that is set too must agree with it, field by field):

1. torchrun's own variables, which ``torch.distributed.run`` reads as its flags' defaults
   (``torch.distributed.argparse_util.env``: ``PET_<DEST>``): ``PET_NNODES`` (``N`` or
   ``N:N``), ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` or
   ``PET_RDZV_ENDPOINT`` (``host:port``), ``PET_NPROC_PER_NODE``, ``PET_RDZV_ID``,
   ``PET_MAX_RESTARTS``;
2. the torchrun-style names LLaMA-Factory's launcher reads (``src/llamafactory/launcher.py``:
   ``NNODES``, ``NODE_RANK``, ``NPROC_PER_NODE``, ``MASTER_ADDR``, ``MASTER_PORT``,
   ``MAX_RESTARTS``, ``RDZV_ID``; ``MIN_NNODES`` / ``MAX_NNODES`` as it does: an elastic
   range only with ``RDZV_ID`` and both set, then refused unless both equal ``NNODES``, else ignored);
3. a Huawei ModelArts training job's preset variables ("Managing Environment Variables of a
   Training Container", Table 2, https://support.huaweicloud.com/intl/en-us/usermanual-standard-modelarts/develop-modelarts-0104.html):
   ``MA_NUM_HOSTS`` and ``VC_WORKER_NUM`` (instances), ``VC_TASK_INDEX`` (this container's
   index from 0), ``VC_WORKER_HOSTS`` (every node's domain name in order, comma-separated: the
   master is the first, as the page's own ``MASTER_ADDR="${VC_WORKER_HOSTS%%,*}"``),
   ``MA_NUM_GPUS`` (cards per container). ModelArts documents no port: ``MASTER_PORT`` or the
   ``master_port`` parameter gives it.

A path reads a DeepSpeed hostfile (``HOST slots=N`` lines, ``#`` comments and blank lines, as
``deepspeed.launcher.runner._parse_hostfile`` reads them): the hosts are the nodes, the first
is the master, this machine's line its node_rank, its slots ``num_cards``; the port comes from
``MASTER_PORT`` or ``master_port``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from hyport_lib.nodes.addresses import ThisMachine
from hyport_lib.params import parameter_fields
from hyport_lib.utils.bounded_files import UnreadableFile, read_text

#: ``nodes_from`` naming the environment (any other value is a hostfile's path).
FROM_ENVIRONMENT = "env"
#: A hostfile lists a few hosts: more than this is no hostfile.
HOSTFILE_MAX_BYTES = 1 << 20
#: A NodeSettings field -> the train parameter it sets (the parameters are kept by name).
PARAMETER_OF = {"nnodes": "nnodes", "node_rank": "node_rank", "master_addr": "master_addr",
                "master_port": "master_port", "nproc_per_node": "num_cards", "rdzv_id": "rdzv_id",
                "max_restarts": "max_restarts"}
# DeepSpeed's own line pattern (runner._parse_hostfile), with digits that end the word: its
# ``slots=8x`` would be read as 8.
_HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)(?=\s|$)")
_SLOTS = re.compile(r"\bslots=(\S*)")
#: ``slots=`` straight after the host, as DeepSpeed's pattern wants it.
_SLOTS_AFTER_HOST = re.compile(r"^\S+\s+slots=")


class NodeInputError(ValueError):
    """A node source that is missing, malformed or contradicts a parameter: one line naming
    the variable, or the hostfile and its line."""


@dataclass(frozen=True)
class NodeSettings:
    """What a source says about the nodes; None: the source does not say (the parameter stays
    as given). ``origins`` names, per field, where its value came from (``NNODES=2``)."""

    nnodes: int
    node_rank: int
    source: str
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    nproc_per_node: Optional[int] = None
    rdzv_id: Optional[str] = None
    max_restarts: Optional[int] = None
    origins: dict = field(default_factory=dict, compare=False)

    def said(self) -> dict[str, Any]:
        """The fields the source sets (None left out)."""
        return {k: getattr(self, k) for k in PARAMETER_OF if getattr(self, k) is not None}


# --------------------------------------------------------------------------- the environment
@dataclass(frozen=True)
class _Names:
    """One source's variable names (None: it has none for that field)."""

    label: str
    nnodes: str
    node_rank: str
    master_addr: str
    master_port: str
    nproc_per_node: str
    rdzv_id: str
    max_restarts: str


_TORCHRUN = _Names("torchrun's variables", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                   "PET_NPROC_PER_NODE", "PET_RDZV_ID", "PET_MAX_RESTARTS")
#: torchrun's ``--rdzv-endpoint`` (``host:port``): the master's address and port at once.
_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
_LLAMA_FACTORY = _Names("LLaMA-Factory variables", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                        "NPROC_PER_NODE", "RDZV_ID", "MAX_RESTARTS")


def from_environment(environ: Optional[Mapping[str, str]] = None) -> NodeSettings:
    """The first source set in ``environ`` (torchrun's, LLaMA-Factory's, ModelArts'), checked
    against any later one that is set too."""
    environ = os.environ if environ is None else environ
    readers: list[Callable[[Mapping[str, str]], Optional[NodeSettings]]] = [
        _torchrun, lambda env: _torchrun_style(env, _LLAMA_FACTORY), _modelarts]
    found = [settings for settings in (read(environ) for read in readers) if settings is not None]
    if not found:
        raise NodeInputError("nodes_from='env': no node variables are set (torchrun's PET_NNODES, "
                             "LLaMA-Factory's NNODES, ModelArts' MA_NUM_HOSTS / VC_WORKER_HOSTS); set them, "
                             "or give nnodes, node_rank, master_addr and master_port")
    first = found[0]
    for other in found[1:]:
        for key, value in other.said().items():
            if key in first.said() and first.said()[key] != value:
                raise NodeInputError(f"{first.origins[key]} ({first.source}) but {other.origins[key]} "
                                     f"({other.source}): the sources disagree; unset one of them")
    return first


def _torchrun(environ: Mapping[str, str]) -> Optional[NodeSettings]:
    endpoint = environ.get(_RDZV_ENDPOINT, "").strip()
    return _torchrun_style(environ, _TORCHRUN, endpoint=endpoint or None)


def _endpoint(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (torchrun's ``--rdzv-endpoint``)."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", text)
    if not match:
        raise NodeInputError(f"{_RDZV_ENDPOINT}={text!r}: expected HOST:PORT")
    host = match.group(1) or match.group(3)
    return host, _port(_RDZV_ENDPOINT, match.group(2) or match.group(4))


def _torchrun_style(environ: Mapping[str, str], names: _Names,
                    endpoint: Optional[str] = None) -> Optional[NodeSettings]:
    """A torchrun-style source (torchrun's own or LLaMA-Factory's names); None when its node
    count is not set. ``endpoint``: torchrun's ``PET_RDZV_ENDPOINT``, the master's address and
    port too."""
    def value(name: str) -> Optional[str]:
        text = environ.get(name, "").strip()
        return text or None

    count_text = value(names.nnodes)
    if count_text is None:
        return None
    if names is _LLAMA_FACTORY:
        _refuse_elastic_range(environ, count_text)
    nnodes = _node_count(names.nnodes, count_text)
    origins = {"nnodes": f"{names.nnodes}={value(names.nnodes)}"}
    rank_text = value(names.node_rank)
    if rank_text is None and nnodes > 1:
        raise NodeInputError(f"{origins['nnodes']} but {names.node_rank} is not set: give each node its "
                             f"rank, 0 .. {nnodes - 1} (node 0 writes the job's record)")
    node_rank = _whole(names.node_rank, rank_text or "0", minimum=0)
    check_rank(names.node_rank, node_rank, origins["nnodes"], nnodes)
    addr, port_text = value(names.master_addr), value(names.master_port)
    port = _port(names.master_port, port_text) if port_text else None
    for key, text in (("node_rank", rank_text), ("master_addr", addr), ("master_port", port_text)):
        if text is not None:
            origins[key] = f"{getattr(names, key)}={text}"
    if endpoint is not None:
        endpoint_addr, endpoint_port = _endpoint(endpoint)
        for key, given, said in (("master_addr", addr, endpoint_addr), ("master_port", port, endpoint_port)):
            if given is not None and given != said:
                raise NodeInputError(f"{origins[key]} but {_RDZV_ENDPOINT}={endpoint}: they disagree; unset one")
            origins[key] = f"{_RDZV_ENDPOINT}={endpoint}"
        addr, port = endpoint_addr, endpoint_port
    if addr is None and nnodes > 1:
        raise NodeInputError(f"{origins['nnodes']} but {names.master_addr} is not set: give node 0's "
                             "address on every node")
    procs_text, restarts_text, rdzv_id = value(names.nproc_per_node), value(names.max_restarts), value(names.rdzv_id)
    for key, text in (("nproc_per_node", procs_text), ("rdzv_id", rdzv_id), ("max_restarts", restarts_text)):
        if text is not None:
            origins[key] = f"{getattr(names, key)}={text}"
    used = [name for name in dataclasses.astuple(names)[1:] if value(name) is not None]
    used += [_RDZV_ENDPOINT] if endpoint is not None else []
    return NodeSettings(
        nnodes=nnodes, node_rank=node_rank, source=f"{names.label} {', '.join(used)}", master_addr=addr,
        master_port=port, nproc_per_node=_processes(names.nproc_per_node, procs_text) if procs_text else None,
        rdzv_id=rdzv_id, max_restarts=_whole(names.max_restarts, restarts_text, minimum=0) if restarts_text else None,
        origins=origins)


def _refuse_elastic_range(environ: Mapping[str, str], count_text: str) -> None:
    """LLaMA-Factory's launcher (``src/llamafactory/cli.py``) gives torchrun ``--nnodes
    MIN_NNODES:MAX_NNODES`` only where ``RDZV_ID`` is set and both are; otherwise it ignores
    them, and so does hyport."""
    bounds = {name: environ.get(name, "").strip() for name in ("MIN_NNODES", "MAX_NNODES")}
    if not environ.get("RDZV_ID", "").strip() or not all(bounds.values()):
        return
    for name, text in bounds.items():
        if text != count_text:
            raise NodeInputError(f"{name}={text} with RDZV_ID (an elastic node range, MIN_NNODES:MAX_NNODES="
                                 f"{bounds['MIN_NNODES']}:{bounds['MAX_NNODES']}) but NNODES={count_text}: hyport "
                                 f"runs a fixed number of nodes; unset {name}")


def _modelarts(environ: Mapping[str, str]) -> Optional[NodeSettings]:
    def value(name: str) -> Optional[str]:
        text = environ.get(name, "").strip()
        return text or None

    counts = {name: value(name) for name in ("MA_NUM_HOSTS", "VC_WORKER_NUM")}
    hosts_text = value("VC_WORKER_HOSTS")
    if hosts_text is None and not any(counts.values()):
        return None
    hosts = [h.strip() for h in hosts_text.split(",")] if hosts_text else []
    if any(not h for h in hosts):
        raise NodeInputError(f"VC_WORKER_HOSTS={hosts_text!r}: an empty host name between its commas")
    said = {name: _whole(name, text, minimum=1) for name, text in counts.items() if text is not None}
    if hosts:
        said["VC_WORKER_HOSTS"] = len(hosts)
    if len(set(said.values())) > 1:
        detail = ", ".join(f"{name}={count}" if name != "VC_WORKER_HOSTS" else f"VC_WORKER_HOSTS lists {count}"
                           for name, count in said.items())
        raise NodeInputError(f"ModelArts variables disagree on the number of nodes ({detail})")
    count_name, nnodes = next(iter(said.items()))
    origins = {"nnodes": f"{count_name}={nnodes}" if count_name != "VC_WORKER_HOSTS"
               else f"VC_WORKER_HOSTS={hosts_text}"}
    index_text = value("VC_TASK_INDEX")
    if index_text is None and nnodes > 1:
        raise NodeInputError(f"{origins['nnodes']} but VC_TASK_INDEX is not set: ModelArts sets it on each node")
    node_rank = _whole("VC_TASK_INDEX", index_text or "0", minimum=0)
    if index_text is not None:
        origins["node_rank"] = f"VC_TASK_INDEX={index_text}"
    check_rank("VC_TASK_INDEX", node_rank, origins["nnodes"], nnodes)
    if not hosts and nnodes > 1:
        raise NodeInputError(f"{origins['nnodes']} but VC_WORKER_HOSTS is not set: the master is its first host")
    master = hosts[0] if hosts else None
    if master is not None:
        origins["master_addr"] = f"VC_WORKER_HOSTS={hosts_text} (the first host)"
    port_text, cards_text = value("MASTER_PORT"), value("MA_NUM_GPUS")
    port = _port("MASTER_PORT", port_text) if port_text else None
    if port is not None:
        origins["master_port"] = f"MASTER_PORT={port_text}"
    cards = _whole("MA_NUM_GPUS", cards_text, minimum=0) if cards_text else 0
    if cards:
        origins["nproc_per_node"] = f"MA_NUM_GPUS={cards_text}"
    used = [n for n in ("MA_NUM_HOSTS", "VC_WORKER_NUM", "VC_TASK_INDEX", "VC_WORKER_HOSTS", "MA_NUM_GPUS",
                        "MASTER_PORT") if value(n) is not None]
    return NodeSettings(nnodes=nnodes, node_rank=node_rank, source=f"ModelArts variables {', '.join(used)}",
                        master_addr=master, master_port=port, nproc_per_node=cards or None, origins=origins)


# --------------------------------------------------------------------------- every value set
#: ModelArts' variables, field by field (its master is the first of VC_WORKER_HOSTS).
_MODELARTS = {"nnodes": ("MA_NUM_HOSTS", "VC_WORKER_NUM"), "node_rank": ("VC_TASK_INDEX",),
              "master_addr": ("VC_WORKER_HOSTS",), "master_port": ("MASTER_PORT",), "nproc_per_node": ("MA_NUM_GPUS",)}


@dataclass(frozen=True)
class NodeValue:
    """One field as one variable (or a parameter, or a hostfile) sets it: ``value`` read as
    the field's type, or ``problem``, the one line that says why it cannot be."""

    field: str  # a NodeSettings field
    name: str  # where it is said: NNODES, PET_RDZV_ENDPOINT, parameter ...
    text: str
    value: Any = None
    problem: Optional[str] = None


def read_value(key: str, name: str, text: str, reader: Optional[Callable[[str, str], Any]] = None) -> NodeValue:
    """``text`` read as field ``key``, as the sources read it (``name`` is said in the problem)."""
    readers: dict[str, Callable[[str, str], Any]] = {
        "nnodes": _node_count, "node_rank": lambda n, t: _whole(n, t, minimum=0), "master_addr": lambda n, t: t,
        "master_port": _port, "nproc_per_node": _processes, "rdzv_id": lambda n, t: t,
        "max_restarts": lambda n, t: _whole(n, t, minimum=0)}
    try:
        return NodeValue(key, name, text, (reader or readers[key])(name, text))
    except NodeInputError as exc:
        return NodeValue(key, name, text, problem=str(exc))


def environment_values(environ: Optional[Mapping[str, str]] = None) -> list[NodeValue]:
    """Every node variable set in ``environ``, each read on its own, in :func:`from_environment`'s
    order of the sources (torchrun's, LLaMA-Factory's, ModelArts'). Unlike it, this judges no
    source as a whole (a count without a rank is listed as it is): stage 01 names each value,
    and every pair that disagrees."""
    environ = os.environ if environ is None else environ
    found: dict[tuple[str, str], NodeValue] = {}

    def add(value: NodeValue) -> None:
        found.setdefault((value.field, value.name), value)

    for names in (_TORCHRUN, _LLAMA_FACTORY):
        for key in PARAMETER_OF:
            text = environ.get(getattr(names, key), "").strip()
            if text:
                add(read_value(key, getattr(names, key), text))
        endpoint = environ.get(_RDZV_ENDPOINT, "").strip()
        if names is _TORCHRUN and endpoint:
            try:
                said = dict(zip(("master_addr", "master_port"), _endpoint(endpoint)))
                for key, value in said.items():
                    add(NodeValue(key, _RDZV_ENDPOINT, endpoint, value))
            except NodeInputError as exc:
                for key in ("master_addr", "master_port"):
                    add(NodeValue(key, _RDZV_ENDPOINT, endpoint, problem=str(exc)))
    for key, variables in _MODELARTS.items():
        for name in variables:
            text = environ.get(name, "").strip()
            if not text:
                continue
            if name == "VC_WORKER_HOSTS":
                first = text.split(",")[0].strip()
                add(NodeValue(key, name, text, first) if first else NodeValue(
                    key, name, text, problem=f"{name}={text!r}: an empty host name between its commas"))
            elif name == "MA_NUM_GPUS":  # 0: a CPU flavour, not a number of processes
                add(read_value(key, name, text, lambda n, t: _whole(n, t, minimum=0) or None))
            else:
                add(read_value(key, name, text))
    return list(found.values())


# --------------------------------------------------------------------------- a hostfile
@dataclass(frozen=True)
class HostLine:
    number: int  # the line in the file, from 1
    text: str
    host: str
    slots: int


def parse_hostfile(path: str, text: str) -> list[HostLine]:
    """The hosts of a DeepSpeed hostfile, in order; :class:`NodeInputError` naming the file and
    the line of the first bad one."""
    hosts: list[HostLine] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"hostfile {path} line {number}: {line!r}"
        match = _HOSTFILE_LINE.match(line)
        if match is None:
            slots = _SLOTS.search(line)
            if slots is None:
                why = "expected 'HOST slots=N' (DeepSpeed's hostfile)"
            elif not _SLOTS_AFTER_HOST.match(line):
                why = "slots= must follow the host name ('HOST slots=N', as DeepSpeed reads it)"
            else:  # stricter than DeepSpeed, which reads slots=8x or slots=8#gpu as 8
                why = f"slots must be a number (slots={slots.group(1)})"
            raise NodeInputError(f"{where}: {why}")
        host, slots_count = match.group(1), int(match.group(2))
        if slots_count < 1:
            raise NodeInputError(f"{where}: slots must be at least 1")
        earlier = next((h for h in hosts if h.host == host), None)
        if earlier is not None:
            raise NodeInputError(f"{where}: {host} is listed already (line {earlier.number})")
        hosts.append(HostLine(number, line, host, slots_count))
    if not hosts:
        raise NodeInputError(f"hostfile {path} lists no host (expected 'HOST slots=N' lines)")
    if len({h.slots for h in hosts}) > 1:
        detail = ", ".join(f"line {h.number}: {h.host} slots={h.slots}" for h in hosts)
        raise NodeInputError(f"hostfile {path}: the slots differ ({detail}); hyport runs the same number of "
                             "processes on every node")
    return hosts


def read_hostfile(path: str) -> list[HostLine]:
    """The hosts of the hostfile at ``path`` (:func:`parse_hostfile`)."""
    try:
        text = read_text(Path(path).expanduser(), HOSTFILE_MAX_BYTES)
    except UnreadableFile as exc:  # every refusal of the reader: no such file, a folder, a FIFO ...
        raise NodeInputError(f"nodes_from={path!r}: {exc.reason}") from None
    return parse_hostfile(path, text)


def from_hostfile(path: str, environ: Optional[Mapping[str, str]] = None,
                  machine: Optional[ThisMachine] = None, node_rank: int = 0) -> NodeSettings:
    """The nodes the hostfile at ``path`` lists (:func:`hostfile_settings`)."""
    return hostfile_settings(path, read_hostfile(path), environ, machine, node_rank)


def hostfile_settings(path: str, hosts: list[HostLine], environ: Optional[Mapping[str, str]] = None,
                      machine: Optional[ThisMachine] = None, node_rank: int = 0) -> NodeSettings:
    """The nodes a hostfile lists. Where several lines are this machine (nodes started on one
    host), ``node_rank`` picks one of them."""
    environ = os.environ if environ is None else environ
    machine = machine or ThisMachine.here()
    mine = [rank for rank, h in enumerate(hosts) if machine.is_host(h.host)]
    if not mine:
        raise NodeInputError(f"this machine ({machine.describe()}) is not in hostfile {path} "
                             f"({', '.join(h.host for h in hosts)})")
    rank = mine[0] if len(mine) == 1 else node_rank
    if len(mine) > 1 and rank not in mine:
        lines = ", ".join(f"line {hosts[r].number} ({hosts[r].host})" for r in mine)
        raise NodeInputError(f"hostfile {path}: this machine is {lines}; node_rank={node_rank} is none of them: "
                             f"give node_rank={' or '.join(str(r) for r in mine)}")
    line = hosts[rank]
    origins = {"nnodes": f"hostfile {path} ({len(hosts)} hosts)",
               "node_rank": f"hostfile {path} line {line.number} ({line.host}: this machine)",
               "master_addr": f"hostfile {path} line {hosts[0].number} ({hosts[0].host}: the first host)",
               "nproc_per_node": f"hostfile {path} line {line.number} (slots={line.slots})"}
    port_text = environ.get("MASTER_PORT", "").strip()
    port = _port("MASTER_PORT", port_text) if port_text else None
    if port is not None:
        origins["master_port"] = f"MASTER_PORT={port_text}"
    source = f"hostfile {path}" + (" and MASTER_PORT" if port is not None else "")
    return NodeSettings(nnodes=len(hosts), node_rank=rank, source=source, master_addr=hosts[0].host,
                        master_port=port, nproc_per_node=line.slots, origins=origins)


# --------------------------------------------------------------------------- the parameters
def read_node_settings(nodes_from: str, environ: Optional[Mapping[str, str]] = None,
                       machine: Optional[ThisMachine] = None, node_rank: int = 0) -> NodeSettings:
    """``nodes_from``'s settings: the environment (``"env"``) or a hostfile's path."""
    if nodes_from.strip().lower() == FROM_ENVIRONMENT:
        return from_environment(environ)
    return from_hostfile(nodes_from, environ, machine, node_rank)


def settle_node_parameters(params, environ: Optional[Mapping[str, str]] = None,
                           machine: Optional[ThisMachine] = None):
    """``(params with nodes_from's values, notes)``. A parameter still at its declared default
    takes the source's value; one given otherwise must agree with it (a one-line
    :class:`NodeInputError` names both). A setting whose parameter the class lacks is not set."""
    nodes_from = getattr(params, "nodes_from", None)
    if nodes_from is None:
        return params, []
    settings = read_node_settings(nodes_from, environ, machine, node_rank=params.node_rank)
    fields = {f.name: f for f in parameter_fields(type(params))}
    changes = {}
    for key, value in settings.said().items():
        name = PARAMETER_OF[key]
        if name not in fields:
            continue
        given, default = getattr(params, name), fields[name].default
        if given == value:
            continue
        if not (given == default and isinstance(given, bool) == isinstance(default, bool)):
            raise NodeInputError(f"{name}={given!r} but {settings.origins[key]} (nodes_from={nodes_from!r}): "
                                 f"they disagree; leave {name} out or make them agree")
        changes[name] = value
    settled = dataclasses.replace(params, **changes) if changes else params
    taken = ", ".join(f"{PARAMETER_OF[k]}={v!r}" for k, v in settings.said().items() if PARAMETER_OF[k] in fields)
    return settled, [f"nodes from {settings.source}: {taken}"]


# --------------------------------------------------------------------------- numbers
def _whole(name: str, text: str, minimum: int) -> int:
    if not re.fullmatch(r"[+]?\d+", text.strip()):
        raise NodeInputError(f"{name}={text!r}: expected a whole number")
    number = int(text)
    if number < minimum:
        raise NodeInputError(f"{name}={text!r}: expected a whole number >= {minimum}")
    return number


def _node_count(name: str, text: str) -> int:
    """A number of nodes; torchrun's ``N:N`` is N, an elastic ``M:N`` is refused."""
    low, _, high = text.partition(":")
    if name == _TORCHRUN.nnodes and high:
        if low.strip() != high.strip():
            raise NodeInputError(f"{name}={text!r}: an elastic node range; hyport runs a fixed number of nodes "
                                 f"({name}=N)")
        text = low.strip()
    return _whole(name, text, minimum=1)


def _port(name: str, text: str) -> int:
    port = _whole(name, text, minimum=1)
    if port > 65535:
        raise NodeInputError(f"{name}={text!r}: a port is 1 .. 65535")
    return port


def _processes(name: str, text: str) -> Optional[int]:
    """``auto`` (torchrun's: every card) is num_cards None; ``cpu`` / ``gpu`` / ``xpu`` name a
    device, not a count."""
    if text.lower() == "auto":
        return None
    if not re.fullmatch(r"\d+", text):
        raise NodeInputError(f"{name}={text!r}: hyport needs a number of processes per node (num_cards), or auto")
    return _whole(name, text, minimum=1)


def check_rank(rank_name: str, rank: int, count_said: str, count: int) -> None:
    """:class:`NodeInputError` where ``rank`` is not below the node count (``count_said``: where it came from)."""
    if rank >= count:
        raise NodeInputError(f"{rank_name}={rank} but {count_said}: {rank_name} must be 0 .. {count - 1}")
