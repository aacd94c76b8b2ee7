"""The handshake of a multi-node job, before any model loads: each node's launcher publishes a
:class:`NodeCard` in the rendezvous store, node 0 compares every card with its own and publishes
a :class:`Verdict`; the workers of every node wait for it and leave with its line when refused.

What is compared: the plan's values (the parameters every node is given alike, and what the
plan resolved from them; a path is compared by the digests of what it names, never as typed), the bytes of the dataset file and of the
model's small files (a safetensors file by its header and size), the versions fingerprint
(:mod:`hyport_lib.nodes.versions`), and whether the node sees the token node 0 wrote into its
``output_dir`` (the folder is shared). The first difference is refused in one line naming the
node, its host and the field.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import xxhash

from hyport_lib.nodes.versions import differences
from hyport_lib.utils.typed_records import from_mapping, to_mapping

#: The file node 0 writes into ``output_dir`` before it publishes its card.
#: A file read whole for its digest; a bigger one is taken by its size and its first and last MiB.
WHOLE_FILE_BYTES = 64 << 20
_EDGE_BYTES = 1 << 20
#: The safetensors header is at most this long (the format's own bound is 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000
#: What ``storage`` may be: one folder every node sees, or DeepSpeed's node-local checkpoints.
STORAGE_CHOICES = ("shared", "node_local")


@dataclass
class NodeCard:
    """What one node's launcher publishes: ``plan`` (name -> value, JSON), ``files`` (label ->
    digest), ``versions`` (:func:`~hyport_lib.nodes.versions.versions_fingerprint`),
    ``token``: what this node found in its ``output_dir`` (node 0: the token it wrote there)."""

    node_rank: int = 0
    host: str = ""
    output_dir: str = ""
    plan: dict = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    token: str = ""
    plan_hash: str = ""

    def to_json(self) -> str:
        return json.dumps(to_mapping(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: bytes | str) -> "NodeCard":
        return from_mapping(cls, json.loads(text))

    @property
    def name(self) -> str:
        return f"node {self.node_rank} (host {self.host})"


@dataclass
class Verdict:
    """Node 0's answer: ``refusal`` "" when every card matched; ``resume_checkpoint``: the resume
    point node 0 resolved (in node 0's ``output_dir``), the one every rank resumes."""

    refusal: str = ""
    resume_checkpoint: Optional[str] = None
    output_dir: str = ""
    nodes: int = 0
    refused_node: Optional[int] = None  # the node the refusal names (the others stop with it)

    @property
    def accepted(self) -> bool:
        return not self.refusal

    def to_json(self) -> str:
        return json.dumps(to_mapping(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: bytes | str) -> "Verdict":
        return from_mapping(cls, json.loads(text))

    def resume_path(self, own_output_dir: str) -> Optional[str]:
        """The resume point as this node reads it: a checkpoint inside node 0's ``output_dir``
        is taken in this node's own (the same folder when shared; its own copy when node-local)."""
        if not self.resume_checkpoint:
            return None
        checkpoint = Path(self.resume_checkpoint)
        try:
            inside = checkpoint.relative_to(self.output_dir) if self.output_dir else None
        except ValueError:
            inside = None
        return str(Path(own_output_dir) / inside) if inside is not None else str(checkpoint)


# --------------------------------------------------------------------------- digests
def file_digest(path: os.PathLike) -> str:
    """xxh3-128 of the file's bytes (a file over :data:`WHOLE_FILE_BYTES`: of its size and its
    first and last MiB); a ``.safetensors`` file: of its size and header (what it holds and
    where; reading a model's weights whole on every launch would cost minutes)."""
    path = Path(path)
    size = path.stat().st_size
    digest = xxhash.xxh3_128()
    digest.update(str(size).encode())
    with open(path, "rb") as handle:
        if path.suffix == ".safetensors" and size >= 8:
            (length,) = struct.unpack("<Q", handle.read(8))
            digest.update(handle.read(min(length, MAX_SAFETENSORS_HEADER)))
        elif size <= WHOLE_FILE_BYTES:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        else:
            digest.update(handle.read(_EDGE_BYTES))
            handle.seek(-_EDGE_BYTES, os.SEEK_END)
            digest.update(handle.read(_EDGE_BYTES))
    return digest.hexdigest()


def folder_digests(folder: os.PathLike, label: str) -> dict[str, str]:
    """``{"<label> <name>": digest}`` for each regular file at the top of ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        return {f"{label} {folder.name}": file_digest(folder)} if folder.is_file() else {}
    return {f"{label} {p.name}": file_digest(p) for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.startswith(".")}


def plan_hash(plan: dict, files: dict[str, str]) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps([plan, files], sort_keys=True, default=str).encode())


# --------------------------------------------------------------------------- the comparison
def compare(reference: NodeCard, card: NodeCard, storage: str) -> str:
    """The first difference of ``card`` from node 0's ``reference``, in one line naming the
    node, its host and the field; "" when none."""
    who = card.name
    if storage == "shared" and card.token != reference.token:
        return (f"{who}: does not see node 0's token in output_dir={card.output_dir!r}: the nodes do not "
                "share that folder (storage='shared' needs one folder every node sees, e.g. NFS); give "
                "every node the shared folder, or storage='node_local' for DeepSpeed's node-local checkpoints")
    if card.plan_hash == reference.plan_hash and not differences(reference.versions, card.versions):
        return ""
    for name in _union(reference.plan, card.plan):
        ours, theirs = reference.plan.get(name), card.plan.get(name)
        if ours != theirs:
            return (f"{who}: {name} differs: {_shown(ours)} on node {reference.node_rank}, "
                    f"{_shown(theirs)} on node {card.node_rank}")
    for label in _union(reference.files, card.files):
        ours, theirs = reference.files.get(label), card.files.get(label)
        if ours != theirs:
            if theirs is None or ours is None:
                where = card.node_rank if theirs is None else reference.node_rank
                return f"{who}: {label} differs: missing on node {where}"
            return f"{who}: {label} differs from node {reference.node_rank}'s (its bytes)"
    for name, ours, theirs in differences(reference.versions, card.versions):
        return (f"{who}: {name} differs: {_shown(ours)} on node {reference.node_rank}, "
                f"{_shown(theirs)} on node {card.node_rank}")
    return ""


def verdict(reference: NodeCard, cards: Iterable[NodeCard], storage: str,
            resume_checkpoint: Optional[str], twice: Optional[dict[int, NodeCard]] = None) -> Verdict:
    """Node 0's verdict on every card; ``twice``: node_rank -> the card of a second launcher
    given a node_rank another holds (refused first)."""
    cards = sorted(cards, key=lambda c: c.node_rank)
    held = {c.node_rank: c for c in cards}
    for k, second in sorted((twice or {}).items()):
        first = held.get(k, reference if k == reference.node_rank else None)
        if first is not None and first.host == second.host:
            # two launchers of one host: a second one started by mistake, or node k started
            # again after a crash while the job waited (its first card still holds the rank)
            refusal = (f"node {k} given twice on host {second.host}: two launchers of that host, or node {k} "
                       "started again after it stopped; stop every node and start the job again")
        else:
            hosts = f"hosts {first.host} and {second.host}" if first is not None else f"host {second.host} and another"
            refusal = f"node {k} given twice: {hosts} (give each node its own node_rank)"
        return Verdict(refusal=refusal, output_dir=reference.output_dir, nodes=len(cards), refused_node=k)
    for card in cards:
        if card.node_rank == reference.node_rank:
            continue
        refusal = compare(reference, card, storage)
        if refusal:
            return Verdict(refusal=refusal, output_dir=reference.output_dir, nodes=len(cards),
                           refused_node=card.node_rank)
    return Verdict(resume_checkpoint=resume_checkpoint, output_dir=reference.output_dir, nodes=len(cards))


def _union(first: dict, second: dict) -> list:
    return list(first) + [k for k in second if k not in first]


def _shown(value) -> str:
    if value is None:
        return "not set"
    if isinstance(value, float):
        return f"{value:g}"
    return (value or "''") if isinstance(value, str) else json.dumps(value, default=str)
