"""Stage 03 across hosts, with no launcher between them: each host's ``hyport infer`` (or
notebook 03) runs its own cards as one host does (:func:`run_grid`: every card's worker is
independent), and the hosts meet in ``log_dir``, which must be storage they all see.

* Node 0 writes a fresh token, ``<log_dir>/.hyport_node_token``, and removes it when it is
  done; a node > 0 that does not see it within ``nodes_wait_s`` is refused (its ``log_dir``
  is not node 0's: no shared storage).
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
import json
import secrets
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.inference.agreement import NOT_WAITED_FOR, NodeEntry, host_agreement
from hyport_lib.inference.grid import GridProgress, GridResult, InferencePlan, run_grid
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.utils.bounded_files import read_text
from hyport_lib.utils.files import atomic_write_json, atomic_write_text
from hyport_lib.utils.signals import shielded
from hyport_lib.utils.typed_records import from_mapping, to_mapping

TOKEN_FILE = ".hyport_node_token"
TABLES_FOLDER = "nodes"
#: How often a waiting node looks at the shared folder (an NFS lookup each time).
POLL_INTERVAL_S = 0.5
MAX_TABLE_BYTES = 64 * 2**20
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


def token_path(folder: Path) -> Path:
    return folder / TOKEN_FILE


def table_path(folder: Path, node_rank: int) -> Path:
    return folder / TABLES_FOLDER / f"node{node_rank}.json"


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
    if rank == 0:
        token = secrets.token_hex(16)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(token_path(folder), token)
        try:
            try:
                grid = _own_cards(own_plan, rank, host, on_progress)
            except KeyboardInterrupt as exc:  # stopped: the job's record says whom it did not wait for
                if getattr(exc, "partial", None) is not None:
                    exc.partial = merge(exc.partial, {0: NodeTable(0, host, token, exc.partial)},
                                        int(params.nnodes), folder, token, wait_s, stopped=True)
                raise
            _write_table(folder, NodeTable(rank, host, token, grid))
            return _merge_when_reported(grid, folder, token, int(params.nnodes), wait_s, on_progress,
                                        poll_interval_s)
        finally:
            token_path(folder).unlink(missing_ok=True)
    token = _wait_for_token(folder, rank, host, wait_s, on_progress, poll_interval_s)
    grid = _own_cards(own_plan, rank, host, on_progress, on_stop=lambda partial: _write_table(
        folder, NodeTable(rank, host, _current_token(folder) or token, partial)))
    # The token now, if node 0 wrote another since this node began (it was restarted): the
    # table belongs to the job that will read it.
    _write_table(folder, NodeTable(rank, host, _current_token(folder) or token, grid))
    return grid


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


def _current_token(folder: Path) -> Optional[str]:
    try:
        return token_path(folder).read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def _wait_for_token(folder: Path, rank: int, host: str, wait_s: float, on_progress: Progress,
                    poll_interval_s: float) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        token = _current_token(folder)
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


def read_table(path: Path) -> Optional[NodeTable]:
    """A node's table, or None while there is none (or none that reads as one)."""
    try:
        data = json.loads(read_text(path, MAX_TABLE_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # an odd file in its place: the node has not reported
        return None
    table = from_mapping(NodeTable, data)
    return table if table.grid is not None and table.node_rank >= 0 else None


def _merge_when_reported(own: GridResult, folder: Path, token: str, nnodes: int, wait_s: float,
                         on_progress: Progress, poll_interval_s: float) -> GridResult:
    """Node 0: every node's table holding ``token``, waited for up to ``wait_s``; merged."""
    tables: dict[int, NodeTable] = {0: NodeTable(0, own.host, token, own)}
    others: dict[int, Optional[NodeTable]] = {}  # a table of another job, kept to say so
    deadline = time.monotonic() + wait_s
    try:
        while True:
            for rank in range(1, nnodes):
                if rank in tables:
                    continue
                table = read_table(table_path(folder, rank))
                if table is not None and table.token == token and table.node_rank == rank:
                    tables[rank] = table
                else:
                    others[rank] = table
            missing = [rank for rank in range(nnodes) if rank not in tables]
            if not missing or time.monotonic() >= deadline:
                break
            _waiting(on_progress, ", ".join(f"node {rank}" for rank in missing), own)
            time.sleep(poll_interval_s)
    except KeyboardInterrupt as exc:
        exc.partial = merge(own, tables, nnodes, folder, token, wait_s, others, stopped=True)
        raise
    return merge(own, tables, nnodes, folder, token, wait_s, others)


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
                                 note=_plan_difference(own.config, grid.config) if rank else ""))
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


def _plan_difference(reference: InferenceConfig, config: InferenceConfig) -> str:
    """The first inference setting a node ran otherwise than node 0 (where the model lies
    on a host is its own), in words; empty when they ran the same."""
    mine, theirs = to_mapping(reference), to_mapping(config)
    for name, value in mine.items():
        if name not in HOST_OWN_FIELDS and theirs.get(name) != value:
            return f"ran another plan: {name}={theirs.get(name)!r} (node 0: {value!r})"
    return ""
