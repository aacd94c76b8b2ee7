"""What the weights stage found (:class:`WeightsResult`) and what the report reads back
(:class:`WeightsRecord`). :meth:`WeightsResult.seed_line` sums it up as the seed did: "2 shards,
978 tensors in the index, shards of 5,000,007,256 and 3,065,167,368 bytes holding 472 and 506
keys, model type hunyuan_vl_mot, 3,785,086,960 parameters, LOAD_OK".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from hyport_lib.results import Provenance
from hyport_lib.utils.records import from_mapping
from hyport_lib.weights.compare import Comparison
from hyport_lib.checkpoint_files.findings import Finding, counts
from hyport_lib.weights.layout import Inspection, shard_rows
from hyport_lib.weights.parity import ParityResult
from hyport_lib.weights.reload import ReloadResult
from hyport_lib.weights.scan import ScanResult
from hyport_lib.weights.zero import ZeroListing
from hyport_lib.weights.zero_consolidate import ZeroComparison


@dataclass
class WeightsResult:
    """Everything one verification found (each part None when not asked for)."""

    inspection: Inspection
    options: dict
    findings: list[Finding] = field(default_factory=list)
    scan: Optional[ScanResult] = None
    reload: Optional[ReloadResult] = None
    comparisons: list[Comparison] = field(default_factory=list)
    parity: Optional[ParityResult] = None
    zero: Optional[ZeroListing] = None
    zero_compare: Optional[ZeroComparison] = None
    source: str = ""
    wall_s: float = 0.0
    provenance: Provenance = field(default_factory=lambda: Provenance(device="cpu"))

    @property
    def counts(self) -> dict[str, int]:
        return counts(self.findings)

    def comparison(self, role: str) -> Optional[Comparison]:
        return next((c for c in self.comparisons if c.role == role), None)

    def seed_line(self) -> str:
        """The seed's summary: shards, index tensors, bytes and keys per shard, type, parameters."""
        insp, shards = self.inspection, self.inspection.shards
        if insp.index is not None:
            head = f"{len(insp.index.shards)} shards, {insp.index.tensors:,} tensors in the index"
        elif len(shards) == 1:
            head = f"one file ({shards[0].label}), {len(insp.tensors):,} tensors, {shards[0].size:,} bytes"
        elif shards:
            head = f"{len(shards)} files without an index, {len(insp.tensors):,} tensors"
        else:
            head = "no weights"
        if shards and (insp.index is not None or len(shards) > 1):
            head += f", {'shards' if len(shards) > 1 else 'file'} of {_per_shard(shards)}"
        if insp.config.model_type:
            kind = f"model type {insp.config.model_type}"
        else:
            kind = ("no model type (one file given: config.json not read)" if insp.kind == "file"
                    else "no model type (config.json missing or unusable)")
        line = f"{head}, {kind}, {insp.parameters:,} parameters"
        if insp.tied_duplicates:
            line += f" ({insp.unique_parameters:,} without tied duplicates)"
        if self.reload is not None:
            line += f"; {self.reload.line}"
        return line

    def to_dict(self) -> dict:
        """The result without its verdict (:func:`hyport_lib.weights.stage.result_data` adds it)."""
        insp = self.inspection
        return {
            "summary": self.seed_line(), "source": self.source,
            "path": insp.path, "kind": insp.kind, "options": self.options,
            "shards": shard_rows(insp),
            "index": None if insp.index is None else {  # the weight_map is in the rows
                k: v for k, v in vars(insp.index).items() if k != "weight_map"},
            "tensor_count": len(insp.tensors), "tensor_bytes": insp.tensor_bytes,
            "parameters": insp.parameters, "parameters_without_tied": insp.unique_parameters,
            "tied_duplicates": insp.tied_duplicates,
            "config": vars(insp.config),
            "model_class": insp.names.class_name, "model_class_error": insp.names.error,
            "inspect_s": round(insp.seconds, 4), "model_class_s": round(insp.model_seconds, 3),
            "counts": self.counts, "findings": [f.to_dict() for f in self.findings],
            "scan": None if self.scan is None else {
                "checksum": self.scan.checksum, "bytes_read": self.scan.bytes_read,
                "seconds": round(self.scan.seconds, 3), "skipped": self.scan.skipped,
                "nonfinite_tensors": self.scan.nonfinite_tensors,
                # Each checksum names its algorithm: checksums of two algorithms never compare.
                "tensors": {k: {"file": t.file, "checksum": t.checksum, "algorithm": t.algorithm,
                                "nan": t.nan, "inf": t.inf}
                            for k, t in self.scan.tensors.items()}},
            "reload": self.reload.to_dict() if self.reload else None,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "parity": self.parity.to_dict() if self.parity else None,
            "zero": asdict(self.zero) if self.zero else None,
            "zero_compare": asdict(self.zero_compare) if self.zero_compare else None,
            "wall_s": round(self.wall_s, 3),
            "provenance": self.provenance.to_dict(),
        }


@dataclass
class WeightsRecord:
    """What the report reads back of :meth:`WeightsResult.to_dict`; an older or odd record
    gives the defaults where it differs (:mod:`hyport_lib.utils.records`)."""

    #: where the folders came from (:attr:`hyport_lib.weights.defaults.Sources.note`)
    source: str = ""
    path: Optional[str] = None
    options: dict = field(default_factory=dict)
    shards: list[dict] = field(default_factory=list)
    index: Optional[dict] = None
    reload: Optional[dict] = None

    @classmethod
    def from_dict(cls, data) -> "WeightsRecord":
        return from_mapping(cls, data)


#: Most shards listed one by one in the summary; more are given as ranges (one line for 212 shards).
LISTED_SHARDS = 4


def _per_shard(shards) -> str:
    """Bytes and keys of each shard (the seed's form), or their ranges past :data:`LISTED_SHARDS`."""
    if len(shards) <= LISTED_SHARDS:
        return (f"{_join(f'{s.size:,}' for s in shards)} bytes holding "
                f"{_join(str(len(s.tensors)) for s in shards)} keys")
    sizes = [s.size for s in shards]
    keys = [len(s.tensors) for s in shards]
    return (f"{min(sizes):,} to {max(sizes):,} bytes ({sum(sizes):,} in all) holding "
            f"{min(keys)} to {max(keys)} keys each")


def _join(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
