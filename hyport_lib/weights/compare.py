"""Two checkpoints tensor by tensor (:func:`compare_weights`), keys matched by the model's
names (:mod:`.names`): against a base (training must have changed it: else
``weights_unchanged``) or a checkpoint (same model expected: else ``checkpoint_differs``).
The other side is rounded to the weights' dtype first: a float32 base against bfloat16
weights would count every rounding as training (docs/weights.md, "Comparisons").
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.checkpoint_files.header import DTYPE_BITS, ShardHeader, TensorEntry
from hyport_lib.utils.typed_records import fields_of
from hyport_lib.weights.layout import Inspection
from hyport_lib.utils.wording import counted, plural
from hyport_lib.weights.scan import ScanProgress
from hyport_lib.weights.scan_reads import read_exactly

#: Bytes read from each side per step: not the full scan's 2 MiB, measured for its reader
#: thread; the comparison reads two files in one thread.
CHUNK_BYTES = 16 << 20
ROLES = ("base", "checkpoint")
DIFF_COLUMNS = ("tensor", "status", "dtype", "other dtype", "shape", "other shape",
                "max |Δ|", "relative change")
_TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
}


@dataclass
class Comparison:
    """The weights (``path``) against one other folder in a ``role`` of :data:`ROLES`;
    ``rows``: one dict per tensor (:data:`DIFF_COLUMNS`)."""

    role: str
    path: str
    other_path: str
    rows: list[dict] = field(default_factory=list)
    bytes_read: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r["status"] == status)

    @property
    def changed(self) -> int:
        return self.count("changed")

    @property
    def compared(self) -> int:
        return self.count("changed") + self.count("same")

    def to_dict(self) -> dict:
        return {**fields_of(self), "seconds": round(self.seconds, 3), "changed": self.changed,
                "compared": self.compared, "statuses": dict(Counter(r["status"] for r in self.rows))}


def _ids(insp: Inspection, names) -> dict[str, str]:
    """Model name (by ``names``) -> on-disk key; the on-disk key where two keys share a
    model name."""
    counts = Counter(names.to_model(k) for k in insp.tensors)
    out = {}
    for key in insp.tensors:
        model = names.to_model(key)
        out[model if counts[model] == 1 else key] = key
    return out


def _namers(weights: Inspection, other: Inspection):
    """The name mapping of each side; a side without one (a lone ``.safetensors`` file, a
    config whose class cannot be built) borrows the other's, so that a legacy key on one
    side and the model's name on the other still meet."""
    a, b = weights.names, other.names
    return (a if a._rename else b), (b if b._rename else a)


def compare_weights(weights: Inspection, other: Inspection, *, role: str = "base",
                    chunk_bytes: int = CHUNK_BYTES,
                    on_progress: Optional[Callable[[ScanProgress], None]] = None,
                    min_interval_s: float = 0.2) -> Comparison:
    if role not in ROLES:
        raise ValueError(f"role={role!r}: expected one of {', '.join(ROLES)}")
    started = time.perf_counter()
    result = Comparison(role, weights.path, other.path)
    namer_mine, namer_theirs = _namers(weights, other)
    mine, theirs = _ids(weights, namer_mine), _ids(other, namer_theirs)
    wt, ot = weights.tensors, other.tensors
    pairs = []
    for ident in list(mine) + [i for i in theirs if i not in mine]:
        a = wt[mine[ident]] if ident in mine else None
        b = ot[theirs[ident]] if ident in theirs else None
        row = {"tensor": mine.get(ident, theirs.get(ident)), "status": "", "dtype": a and a[1].dtype,
               "other dtype": b and b[1].dtype, "shape": a and list(a[1].shape),
               "other shape": b and list(b[1].shape), "max |Δ|": None, "relative change": None}
        if a is None:
            row["status"] = "removed"
        elif b is None:
            row["status"] = "added"
        elif a[1].shape != b[1].shape:
            row["status"] = "shape"
        elif not (a[0].can_read(a[1]) and b[0].can_read(b[1]) and a[0].readable and b[0].readable):
            row["status"] = "unreadable"
        else:
            pairs.append((row, a, b))
        result.rows.append(row)
    total = sum(a[1].nbytes + b[1].nbytes for _, a, b in pairs)
    reader = _PairReader(chunk_bytes)
    last = 0.0
    try:
        for done, (row, a, b) in enumerate(pairs):
            try:
                row.update(reader.compare(a, b))
            except OSError as exc:
                row["status"] = "unreadable"
                result.findings.append(Finding("compare_failed", a[0].label, f"`{row['tensor']}`: {exc}"))
            result.bytes_read += a[1].nbytes + b[1].nbytes
            now = time.perf_counter()
            if on_progress and (now - last >= min_interval_s or done == len(pairs) - 1):
                last = now
                on_progress(ScanProgress(f"compare with {role}", result.bytes_read, total, done + 1,
                                         len(pairs), a[0].label, now - started))
    finally:
        reader.close()
    result.seconds = time.perf_counter() - started
    _findings(result, weights, other)
    return result


class _PairReader:
    """Reads two tensors chunk by chunk in step; keeps its files open between tensors."""

    def __init__(self, chunk_bytes: int):
        self.chunk_bytes = chunk_bytes
        self.files: dict[str, object] = {}
        self.bufs = (bytearray(chunk_bytes), bytearray(chunk_bytes))

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()
        self.files.clear()

    def _open(self, shard: ShardHeader):
        key = str(shard.path)
        if key not in self.files:
            self.files[key] = open(shard.path, "rb", buffering=0)
        return self.files[key]

    def _read(self, shard: ShardHeader, offset: int, n: int, buf: bytearray) -> memoryview:
        fh = self._open(shard)
        fh.seek(shard.data_start + offset)
        view = memoryview(buf)[:n]
        if read_exactly(fh, view) < n:
            raise OSError(f"{shard.label} ended early (changed while being read?)")
        return view

    def compare(self, a: tuple[ShardHeader, TensorEntry], b: tuple[ShardHeader, TensorEntry]) -> dict:
        (sa, ea), (sb, eb) = a, b
        bits_a, bits_b = DTYPE_BITS[ea.dtype], DTYPE_BITS[eb.dtype]
        numeric = ea.dtype in _TORCH_DTYPES and eb.dtype in _TORCH_DTYPES
        if not numeric and ea.dtype != eb.dtype:
            return {"status": "not compared"}
        step = max(1, (self.chunk_bytes * 8) // max(bits_a, bits_b))  # whole elements per chunk
        if not numeric:
            step = max(8, step - step % 8)  # packed dtypes: whole bytes
        changed, max_abs, d2, b2 = False, 0.0, 0.0, 0.0
        identical = []  # chunks equal byte for byte: no arithmetic unless the norm is needed
        for first in range(0, ea.numel, step):
            n = min(step, ea.numel - first)
            va = self._read(sa, ea.begin + first * bits_a // 8, n * bits_a // 8, self.bufs[0])
            vb = self._read(sb, eb.begin + first * bits_b // 8, n * bits_b // 8, self.bufs[1])
            if ea.dtype == eb.dtype and np.array_equal(np.frombuffer(va, np.uint8), np.frombuffer(vb, np.uint8)):
                identical.append((first, n))
                continue
            if not numeric:
                changed = True
                continue
            m, dd, bb = _diff(va, vb, ea.dtype, eb.dtype, n)
            # Across dtypes only a difference after rounding counts (NaN counts too).
            changed = changed or ea.dtype == eb.dtype or m != 0.0 or math.isnan(m)
            max_abs, d2, b2 = max(max_abs, m) if not math.isnan(m) else m, d2 + dd, b2 + bb
        if changed and numeric:
            for first, n in identical:  # their share of ‖b‖ for the relative change
                vb = self._read(sb, eb.begin + first * bits_b // 8, n * bits_b // 8, self.bufs[1])
                b2 += _sumsq(vb, eb.dtype, n)
        if not numeric:
            return {"status": "changed" if changed else "same"}
        # Relative to a base of zeros (a fresh bias) it is undefined: max |Δ| tells then.
        rel = math.sqrt(d2) / math.sqrt(b2) if b2 > 0 else (None if d2 > 0 else 0.0)
        return {"status": "changed" if changed else "same", "max |Δ|": float(max_abs),
                "relative change": rel}


def _tensor(view: memoryview, dtype: str, n: int):
    import torch

    return torch.frombuffer(view, dtype=getattr(torch, _TORCH_DTYPES[dtype]), count=n)


def _sumsq(view, dtype: str, n: int) -> float:
    import torch

    t = _tensor(view, dtype, n).to(torch.float64)
    return float(torch.dot(t, t)) if n else 0.0


def _diff(va, vb, da: str, db: str, n: int) -> tuple[float, float, float]:
    """max |a − round(b)|, Σ(a − round(b))², Σ round(b)² over one chunk (b rounded to a's dtype)."""
    import torch

    a = _tensor(va, da, n)
    b = _tensor(vb, db, n)
    if da != db:
        b = b.to(a.dtype)
    a, b = a.to(torch.float64), b.to(torch.float64)
    d = a - b
    return float(d.abs().max()) if n else 0.0, float(torch.dot(d, d)), float(torch.dot(b, b))


def _findings(result: Comparison, weights: Inspection, other: Inspection) -> None:
    add = result.findings.append
    rows = result.rows
    by = {s: [r for r in rows if r["status"] == s] for s in ("removed", "added", "shape", "changed", "same")}
    dtype_rows = [r for r in rows if r["dtype"] and r["other dtype"] and r["dtype"] != r["other dtype"]]
    other_label = f"{other.path} ({result.role})"
    if dtype_rows:
        kinds = Counter(f"{r['other dtype']} → {r['dtype']}" for r in dtype_rows)
        add(Finding("dtype_changed", other_label,
                    f"{counted(len(dtype_rows), 'tensor')} changed dtype "
                    f"({', '.join(f'{k}: {v}' for k, v in kinds.items())}); "
                    f"values compared after rounding the {result.role} to the saved dtype",
                    tensors=[r["tensor"] for r in dtype_rows]))
    if result.role == "checkpoint":
        differ = by["removed"] + by["added"] + by["shape"] + by["changed"]
        if differ:
            parts = [f"{len(by[s])} {s}" for s in ("changed", "added", "removed", "shape") if by[s]]
            add(Finding("checkpoint_differs", other_label,
                        f"{', '.join(parts).replace('shape', 'shape changed')} of {counted(len(rows), 'tensor')}: "
                        f"{name_some(r['tensor'] for r in differ)}",
                        tensors=[r["tensor"] for r in differ]))
        return
    shared = len(rows) - len(by["removed"]) - len(by["added"])
    base_tensors = len(rows) - len(by["added"])
    if base_tensors and shared * 2 < base_tensors:
        add(Finding("base_mismatch", other_label,
                    f"only {shared} of the base's {counted(base_tensors, 'tensor')} {plural('is', shared, 'are')} "
                    "in the weights: the base "
                    "is another model (or another layout); give the model training started from"))
    if by["removed"]:
        add(Finding("key_removed", other_label, f"{counted(len(by['removed']), 'tensor')} of the base "
                    f"{plural('is', len(by['removed']), 'are')} not in the weights: "
                    f"{name_some(r['tensor'] for r in by['removed'])}",
                    tensors=[r["tensor"] for r in by["removed"]]))
    if by["added"]:
        add(Finding("key_added", weights.path, f"{counted(len(by['added']), 'tensor')} not in the base: "
                    f"{name_some(r['tensor'] for r in by['added'])}",
                    tensors=[r["tensor"] for r in by["added"]]))
    if by["shape"]:
        r = by["shape"][0]
        add(Finding("shape_changed", weights.path, f"{counted(len(by['shape']), 'tensor')} changed shape, e.g. "
                    f"`{r['tensor']}` {r['other shape']} → {r['shape']}",
                    tensors=[r["tensor"] for r in by["shape"]]))
    if by["same"] and not by["changed"]:
        add(Finding("weights_unchanged", weights.path,
                    f"none of the {len(by['same'])} compared tensors differs from the base "
                    f"{other.path}: training changed nothing (or the wrong folder was saved)"))
