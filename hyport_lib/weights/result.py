"""What the weights stage found (:class:`WeightsResult`), as the run holds it and as its
record reads back. :meth:`WeightsResult.seed_line` sums it up as the seed did: "2 shards,
978 tensors in the index, shards of 5,000,007,256 and 3,065,167,368 bytes holding 472 and 506
keys, model type hunyuan_vl_mot, 3,785,086,960 parameters, LOAD_OK".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, counts
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.results import Provenance
from hyport_lib.utils.typed_records import fields_of
from hyport_lib.weights.compare import Comparison
from hyport_lib.weights.layout import ConfigInfo, IndexInfo, Inspection, shard_rows
from hyport_lib.weights.reload import ParityResult, ReloadResult
from hyport_lib.weights.scan import ScanResult
from hyport_lib.weights.zero import ZeroComparison, ZeroListing


@dataclass
class WeightsResult:
    """Each check None when not asked for; ``source``: where the folders came from
    (:attr:`.defaults.Sources.note`). ``inspection``, every header, is the run's only: a
    record holds what it says in the fields above it."""

    source: str = ""
    path: str = ""
    kind: str = ""  # sharded | single | file (one file given) | none
    options: dict = field(default_factory=dict)
    shards: list[dict] = field(default_factory=list)
    index: Optional[IndexInfo] = None
    tensor_count: int = 0
    tensor_bytes: int = 0
    parameters: int = 0
    parameters_without_tied: int = 0
    tied_duplicates: list[str] = field(default_factory=list)
    config: ConfigInfo = field(default_factory=ConfigInfo)
    model_class: Optional[str] = None
    model_class_error: Optional[str] = None
    inspect_s: float = 0.0
    model_class_s: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    scan: Optional[ScanResult] = None
    reload: Optional[ReloadResult] = None
    comparisons: list[Comparison] = field(default_factory=list)
    parity: Optional[ParityResult] = None
    zero: Optional[ZeroListing] = None
    zero_compare: Optional[ZeroComparison] = None
    #: the host RAM the reload and the parity need, as the memory model judged it before each child
    reload_memory: Optional[MemoryPlan] = None
    parity_memory: Optional[MemoryPlan] = None
    wall_s: float = 0.0
    #: Why nothing was checked ("": checked): a node > 0's stage 05 (:attr:`.defaults.Sources.skip`).
    skipped: str = ""
    provenance: Provenance = field(default_factory=lambda: Provenance(device="cpu"))
    inspection: Optional[Inspection] = field(default=None, repr=False)

    @property
    def counts(self) -> dict[str, int]:
        return counts(self.findings)

    def comparison(self, role: str) -> Optional[Comparison]:
        return next((c for c in self.comparisons if c.role == role), None)

    def seed_line(self) -> str:
        shards = self.shards
        if self.index is not None:
            head = f"{len(self.index.shards)} shards, {self.index.tensors:,} tensors in the index"
        elif len(shards) == 1:
            head = f"one file ({shards[0]['file']}), {self.tensor_count:,} tensors, {shards[0]['bytes']:,} bytes"
        elif shards:
            head = f"{len(shards)} files without an index, {self.tensor_count:,} tensors"
        else:
            head = "no weights"
        if shards and (self.index is not None or len(shards) > 1):
            head += f", {'shards' if len(shards) > 1 else 'file'} of {_per_shard(shards)}"
        if self.config.model_type:
            kind = f"model type {self.config.model_type}"
        else:
            kind = ("no model type (one file given: config.json not read)" if self.kind == "file"
                    else "no model type (config.json missing or unusable)")
        line = f"{head}, {kind}, {self.parameters:,} parameters"
        if self.tied_duplicates:
            line += f" ({self.parameters_without_tied:,} without tied duplicates)"
        if self.reload is not None:
            line += f"; {self.reload.line}"
        return line

    def to_dict(self) -> dict:
        """The record (the verdict is :func:`.stage.result_data`'s): the fields but the
        inspection, with the seed's line and the findings' counts."""
        data = {"summary": self.seed_line(), **fields_of(self), "counts": self.counts}
        del data["inspection"]
        if self.index is not None:  # its weight_map is in the rows
            del data["index"]["weight_map"]
        return data


def inspected(insp: Inspection, options: dict, source: str) -> WeightsResult:
    """The result as the headers tell it (their findings the first), before any other check."""
    return WeightsResult(source, insp.path, insp.kind, options, shard_rows(insp), insp.index, len(insp.tensors),
                         insp.tensor_bytes, insp.parameters, insp.unique_parameters, insp.tied_duplicates,
                         insp.config, insp.names.class_name, insp.names.error, round(insp.seconds, 4),
                         round(insp.model_seconds, 3), findings=list(insp.findings), inspection=insp)


#: Most shards listed one by one in the summary; more are given as ranges (one line for 212 shards).
LISTED_SHARDS = 4


def _per_shard(shards) -> str:
    """Bytes and keys of each shard (the seed's form), or their ranges past :data:`LISTED_SHARDS`."""
    if len(shards) <= LISTED_SHARDS:
        return (f"{_join(format(s['bytes'], ',') for s in shards)} bytes holding "
                f"{_join(str(s['tensors']) for s in shards)} keys")
    sizes = [s["bytes"] for s in shards]
    keys = [s["tensors"] for s in shards]
    return (f"{min(sizes):,} to {max(sizes):,} bytes ({sum(sizes):,} in all) holding "
            f"{min(keys)} to {max(keys)} keys each")


def _join(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
