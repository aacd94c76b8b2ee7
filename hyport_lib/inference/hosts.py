"""Stage 03 across hosts, with no launcher between them: each host's ``hyport infer`` (or
notebook 03) runs its own cards as one host does (:func:`run_grid`: every card's worker is
independent), and the hosts meet in ``log_dir``, which must be storage they all see.

* Node 0 holds ``<log_dir>/.hyport_node0.lock`` (a second node 0 there is refused, naming
  the first's host), writes a fresh token, ``<log_dir>/.hyport_node0_token``, and removes it
  when it is done; a node > 0 that does not see it within ``nodes_wait_s`` is refused (its
  ``log_dir`` is not node 0's: no shared storage).
* A node > 0 claims its rank for that token (a file created exclusively,
  ``<log_dir>/nodes/node<k>.<token>.claim``, holding its host): a second host started with
  the same ``node_rank`` is refused, naming both hosts.
* Each node's cards log under ``<log_dir>/node<k>/``; its card table (:class:`NodeTable`:
  host, node_rank, the token it saw, its :class:`GridResult`) goes atomically to
  ``<log_dir>/nodes/node<k>.json``.
* Node 0, once its own cards finished, waits up to ``nodes_wait_s`` for every other
  node's table that holds its token and merges them into one grid, rows host × card,
  judged across hosts (:mod:`.agreement`). A node > 0's result is its own cards only: the
  job's record is node 0's.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.inference.agreement import NOT_WAITED_FOR, NodeEntry, host_agreement
from hyport_lib.inference.grid import GridProgress, GridResult, InferencePlan, run_grid
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.nodes.shared_folder import read_token, token_path, write_token
from hyport_lib.utils.bounded_files import read_text
from hyport_lib.utils.files import atomic_write_json, atomic_write_text
from hyport_lib.utils.signals import shielded
from hyport_lib.utils.typed_records import from_mapping, to_mapping

NODE0_LOCK_FILE = ".hyport_node0.lock"
TABLES_FOLDER = "nodes"
#: How often a waiting node looks at the shared folder (an NFS lookup each time).
POLL_INTERVAL_S = 0.5
MAX_TABLE_BYTES = 64 * 2**20
#: A token, a claim or a lock's holder: a few words.
MAX_NOTE_BYTES = 4096
#: Configuration fields a host may set its own way: where the model lies on that host.
HOST_OWN_FIELDS = ("model_path", "image")

Progress = Optional[Callable[[GridProgress], None]]


@dataclass
class NodeTable:
    """One node's cards, as it wrote them for node 0."""

    node_rank: int = -1
    host: str = ""
    token: str = ""  # node 0's token as this node read it: which job the table belongs to
    grid: Optional[GridResult] = None


def table_path(folder: Path, node_rank: int) -> Path:
    return folder / TABLES_FOLDER / f"node{node_rank}.json"


def claim_path(folder: Path, token: str, node_rank: int) -> Path:
    """Node ``node_rank``'s claim of its rank in the job of ``token``."""
    return folder / TABLES_FOLDER / f"node{node_rank}.{token}.claim"


def node_folder(folder: Path, node_rank: int) -> Path:
    """Where a node's cards write their logs (card numbers repeat across hosts)."""
    return folder / f"node{node_rank}"


def run_node(plan: InferencePlan, *, on_progress: Progress = None, host: Optional[str] = None,
             poll_interval_s: float = POLL_INTERVAL_S) -> GridResult:
    """This node's part of a multi-host grid (``plan.params.nnodes > 1``): node 0's merged
    grid, or a node > 0's own cards.

    Raises:
        RuntimeError: a node > 0 does not see node 0's token within ``nodes_wait_s``.
    """
    params = plan.params
    folder, rank, wait_s = Path(plan.log_dir), int(params.node_rank), float(params.nodes_wait_s)
    host = host or socket.gethostname()
    own_plan = dataclasses.replace(plan, log_dir=node_folder(folder, rank))
    nnodes = int(params.nnodes)
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _hold_node0_lock(folder, host)
        try:
            token = write_token(folder)
            try:
                grid = _own_cards(own_plan, rank, host, on_progress)
            except KeyboardInterrupt as exc:  # stopped: the job's record says whom it did not wait for
                if getattr(exc, "partial", None) is not None:
                    # the tables already there count: only the missing nodes were not waited for
                    tables, others = _collect(folder, token, nnodes, {0: NodeTable(0, host, token, exc.partial)})
                    exc.partial = merge(exc.partial, tables, nnodes, folder, token, wait_s, others, stopped=True)
                raise
            _write_table(folder, NodeTable(rank, host, token, grid))
            return _merge_when_reported(grid, folder, token, nnodes, wait_s, on_progress, poll_interval_s)
        finally:
            token_path(folder).unlink(missing_ok=True)  # ours: the lock kept every other node 0 out
            lock.close()
    token = _wait_for_token(folder, rank, host, wait_s, on_progress, poll_interval_s)
    _claim_rank(folder, token, rank, host)
    grid = _own_cards(own_plan, rank, host, on_progress, on_stop=lambda partial: _write_table(
        folder, NodeTable(rank, host, _token_now(folder, token, rank, host), partial)))
    # The token now, if node 0 wrote another since this node began (it was restarted): the
    # table belongs to the job that will read it.
    _write_table(folder, NodeTable(rank, host, _token_now(folder, token, rank, host), grid))
    return grid


def _hold_node0_lock(folder: Path, host: str):
    """Node 0's lock on ``folder``, held while the returned file is open (released when its
    process ends, however it ends); a RuntimeError naming the holder's host while another
    node 0 holds it."""
    path = folder / NODE0_LOCK_FILE
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        handle.seek(0)
        holder = handle.read(MAX_NOTE_BYTES).strip() or "unknown host"
        handle.close()
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise RuntimeError(f"node 0 (host {host}): another node 0 is running on {folder} ({holder}; its lock "
                           f"{path} is held): two hosts were started with node_rank=0, or the job twice") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"host {host}, pid {os.getpid()}")
    handle.flush()
    return handle


def _claim_rank(folder: Path, token: str, rank: int, host: str) -> None:
    """This node's rank in the job of ``token``, claimed by creating its claim file
    exclusively; a RuntimeError naming both hosts where another host holds it. A claim of
    this host whose process is gone (the node was restarted) is taken over."""
    path = claim_path(folder, token, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = json.dumps({"host": host, "pid": os.getpid()})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        holder = _claim_holder(path, folder)
        if holder.get("host") != host or _alive(holder.get("pid")):
            raise RuntimeError(f"node {rank} (host {host}): node_rank={rank} is already taken in this job by host "
                               f"{holder.get('host') or 'unknown'} ({path}): two hosts were started with "
                               f"node_rank={rank}") from None
        atomic_write_text(path, mine)
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(mine)


def _claim_holder(path: Path, folder: Path) -> dict:
    try:
        data = json.loads(read_text(path, MAX_NOTE_BYTES, folder=folder))
    except (OSError, ValueError):  # being written, or not a claim: an unknown holder
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _token_now(folder: Path, token: str, rank: int, host: str) -> str:
    """Node 0's token now (claimed for this node where it is new), else ``token``."""
    now = read_token(folder) or token
    if now != token:
        _claim_rank(folder, now, rank, host)
    return now


def _own_cards(plan: InferencePlan, rank: int, host: str, on_progress: Progress,
               on_stop: Optional[Callable[[GridResult], None]] = None) -> GridResult:
    """This host's cards as one host runs them, each row and the result stamped with the
    node; stopped, the partial grid stamped too (and handed to ``on_stop``)."""
    try:
        grid = run_grid(plan, on_progress=on_progress)
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "partial", None)
        if partial is not None:
            exc.partial = _stamped(partial, plan, rank, host)
            if on_stop is not None:
                with shielded():
                    on_stop(exc.partial)
        raise
    return _stamped(grid, plan, rank, host)


def _stamped(grid: GridResult, plan: InferencePlan, rank: int, host: str) -> GridResult:
    rows = [{**row, "host": host, "node": rank} for row in grid.rows]
    return dataclasses.replace(grid, rows=rows, nnodes=int(plan.params.nnodes), node_rank=rank, host=host,
                               nodes_wait_s=float(plan.params.nodes_wait_s))


def _wait_for_token(folder: Path, rank: int, host: str, wait_s: float, on_progress: Progress,
                    poll_interval_s: float) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        token = read_token(folder)
        if token:
            return token
        if time.monotonic() >= deadline:
            raise RuntimeError(f"node {rank} (host {host}): does not see node 0's token in {folder} within "
                               f"nodes_wait_s={wait_s:g}: not shared storage (or node 0 is not running)")
        _waiting(on_progress, "node 0's token")
        time.sleep(poll_interval_s)


def _waiting(on_progress: Progress, whom: str, grid: Optional[GridResult] = None) -> None:
    if on_progress is None:
        return
    frame = grid.frame if grid is not None else GridResult([], False, [], Path(), 0.0).frame
    done = len(frame)
    try:
        on_progress(GridProgress(frame, done, done, running=True, waiting=whom))
    except Exception as exc:  # a broken display must not end the wait (as in run_grid)
        warnings.warn(f"stage 03: on_progress failed ({type(exc).__name__}: {exc}); the wait goes on",
                      RuntimeWarning, stacklevel=2)


def _write_table(folder: Path, table: NodeTable) -> Path:
    return atomic_write_json(table_path(folder, table.node_rank), to_mapping(table))


def read_table(path: Path, folder: Path) -> Optional[NodeTable]:
    """A node's table, or None while there is none (or none that reads as one: a FIFO, a
    link out of ``folder``, the shared folder)."""
    try:
        data = json.loads(read_text(path, MAX_TABLE_BYTES, folder=folder))
    except (OSError, ValueError):  # none yet, or an odd file in its place: the node has not reported
        return None
    table = from_mapping(NodeTable, data)
    return table if table.grid is not None and table.node_rank >= 0 else None


def _merge_when_reported(own: GridResult, folder: Path, token: str, nnodes: int, wait_s: float,
                         on_progress: Progress, poll_interval_s: float) -> GridResult:
    """Node 0: every node's table holding ``token``, waited for up to ``wait_s``; merged."""
    tables: dict[int, NodeTable] = {0: NodeTable(0, own.host, token, own)}
    others: dict[int, Optional[NodeTable]] = {}
    deadline = time.monotonic() + wait_s
    try:
        while True:
            tables, others = _collect(folder, token, nnodes, tables)
            missing = [rank for rank in range(nnodes) if rank not in tables]
            if not missing or time.monotonic() >= deadline:
                break
            _waiting(on_progress, ", ".join(f"node {rank}" for rank in missing), own)
            time.sleep(poll_interval_s)
    except KeyboardInterrupt as exc:
        exc.partial = merge(own, tables, nnodes, folder, token, wait_s, others, stopped=True)
        raise
    return merge(own, tables, nnodes, folder, token, wait_s, others)


def _collect(folder: Path, token: str, nnodes: int, tables: dict[int, NodeTable]
             ) -> tuple[dict[int, NodeTable], dict[int, Optional[NodeTable]]]:
    """``tables`` with every node's table now on ``folder`` that holds ``token``; and what
    lies in the place of each other one (a table of another job, kept to say so)."""
    tables, others = dict(tables), {}
    for rank in range(1, nnodes):
        if rank in tables:
            continue
        table = read_table(table_path(folder, rank), folder)
        if table is not None and table.token == token and table.node_rank == rank:
            tables[rank] = table
        else:
            others[rank] = table
    return tables, others


def merge(own: GridResult, tables: dict[int, NodeTable], nnodes: int, folder: Path, token: str,
          wait_s: float, others: Optional[dict[int, Optional[NodeTable]]] = None,
          stopped: bool = False) -> GridResult:
    """Node 0's grid of every reported node's cards (rows in node, card order), each node's
    entry, and node 0's own plan, provenance and notes."""
    others = others or {}
    rows, outputs, diagnoses, entries = [], {}, {}, []
    for rank in range(nnodes):
        table = tables.get(rank)
        where = str(table_path(folder, rank))
        if table is None:
            entries.append(NodeEntry(rank, reported=False, table=where,
                                     note=_missing_note(rank, wait_s, others.get(rank), token, stopped)))
            continue
        grid = table.grid
        host_rows = [{**row, "host": table.host, "node": rank} for row in grid.rows]
        rows += host_rows
        outputs.update({f"node {rank} card {card}": out for card, out in grid.outputs.items()})
        diagnoses.update({f"node {rank} card {card}": triage for card, triage in grid.diagnoses.items()})
        ok = sum(1 for row in host_rows if row.get("status") == "ok")
        entries.append(NodeEntry(rank, table.host, True, len(host_rows), ok, grid.wall_s, where,
                                 note=_plan_difference(own.config, grid, nnodes) if rank else ""))
    merged = dataclasses.replace(own, rows=rows, outputs=outputs, diagnoses=diagnoses, nodes=entries,
                                 nnodes=nnodes, node_rank=0, log_dir=folder, nodes_wait_s=wait_s)
    agreement = host_agreement(merged.frame)
    every_node = all(entry.reported and not entry.note for entry in entries)
    return dataclasses.replace(merged, consistent=every_node and agreement.reference is not None
                               and not agreement.differing,
                               differing_cards=sorted({card for _, card in agreement.differing}))


def _missing_note(rank: int, wait_s: float, other: Optional[NodeTable], token: str, stopped: bool) -> str:
    if stopped:
        return NOT_WAITED_FOR
    said = f"never reported within nodes_wait_s={wait_s:g}"
    if other is not None and other.node_rank == rank and other.token != token:
        return said + " (its table there belongs to another job: it saw another token of node 0's)"
    return said


def _plan_difference(reference: InferenceConfig, grid: GridResult, nnodes: int) -> str:
    """The job's size, else the first inference setting, that a node ran otherwise than
    node 0 (where the model lies on a host is its own), in words; empty when they ran the
    same."""
    if grid.nnodes != nnodes:
        return f"ran another plan: nnodes={grid.nnodes} (node 0: {nnodes})"
    mine, theirs = to_mapping(reference), to_mapping(grid.config)
    for name, value in mine.items():
        if name not in HOST_OWN_FIELDS and theirs.get(name) != value:
            return f"ran another plan: {name}={theirs.get(name)!r} (node 0: {value!r})"
    return ""
