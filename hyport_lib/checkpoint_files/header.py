"""The safetensors file format (docs/weights.md), read from the header alone (:func:`read_header`).

Every defect is a finding; what these checks pass is also opened with
``safetensors.safe_open``, so a defect they do not know still shows, in safetensors' own words.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.utils.wording import counted, plural

#: Bits per element of every dtype safetensors knows (F4 and F6 are packed).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E5M2", "F8_E4M3", "F8_E8M0",
                          "F4", "F6_E2M3", "F6_E3M2", "C64"})
#: safetensors refuses larger headers ("header too large").
MAX_HEADER_BYTES = 100_000_000


@dataclass
class TensorEntry:
    """One tensor as its header describes it; ``begin``/``end`` relative to the data."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def size_bytes(self) -> int:
        """The tensor's size as the saver counts it (dtype x shape, as ``total_size`` is
        written), else its offsets' span; never negative, even for reversed offsets."""
        expected = self.expected_nbytes
        return expected if expected is not None else max(0, self.nbytes)

    @property
    def expected_nbytes(self) -> Optional[int]:
        """dtype x shape in bytes; None when the bit count is not a whole byte count."""
        bits = self.numel * DTYPE_BITS[self.dtype]
        return bits // 8 if bits % 8 == 0 else None

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass
class ShardHeader:
    """What one file's header says, and what is wrong with it."""

    path: Path
    label: str  # how findings name it (relative to the checkpoint folder)
    size: int = 0
    header_len: Optional[int] = None  # N; None when unreadable
    metadata: dict = field(default_factory=dict)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)  # the valid entries, in header order
    invalid: list[str] = field(default_factory=list)  # names of malformed entries (not in tensors)
    findings: list[Finding] = field(default_factory=list)
    readable: bool = False  # the header parsed; tensors may still have layout defects

    @property
    def data_start(self) -> int:
        return 8 + (self.header_len or 0)

    @property
    def data_len(self) -> int:
        return max(0, self.size - self.data_start)

    @property
    def ok(self) -> bool:
        return self.readable and not any(f.severity == "error" for f in self.findings)

    @property
    def parameters(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    def can_read(self, entry: TensorEntry) -> bool:
        """Inside the data section and exactly dtype x shape long: a tensor of the wrong
        length (a ``size_mismatch`` finding) would be read short or into its neighbour."""
        return 0 <= entry.begin <= entry.end <= self.data_len and entry.expected_nbytes == entry.nbytes


def read_header(path: os.PathLike, *, validate: bool = True) -> ShardHeader:
    """Read and check one safetensors file's header, never its data (its time follows the
    tensor count, not the file size); ``validate``: also ``safe_open`` it when no defect
    was found."""
    path = Path(path)
    shard = ShardHeader(path, path.name)
    add = shard.findings.append
    try:
        st = path.stat()
        shard.size = st.st_size
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block open() forever
            add(Finding("file_unreadable", shard.label,
                        "not a regular file (a FIFO, socket or device): not read"))
            return shard
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                add(Finding("truncated_shard", shard.label,
                            f"the file is {shard.size} bytes: shorter than the 8-byte header length"))
                return shard
            (n,) = struct.unpack("<Q", head)
            shard.header_len = n
            if n > shard.size - 8:
                add(Finding("header_length_beyond_file", shard.label,
                            f"the header length field says {n:,} bytes but only {shard.size - 8:,} "
                            f"bytes follow it (a truncated file, or not a safetensors file)"))
                return shard
            if n > MAX_HEADER_BYTES:
                add(Finding("header_too_large", shard.label,
                            f"the header is {n:,} bytes; safetensors refuses more than {MAX_HEADER_BYTES:,}"))
                return shard
            raw = fh.read(n)
    except OSError as exc:
        add(Finding("file_unreadable", shard.label, f"cannot read: {exc.strerror or exc}"))
        return shard
    header = _parse_json(raw, shard)
    if header is None:
        return shard
    shard.readable = True
    _entries(header, shard)
    _layout(shard)
    if validate and shard.ok:
        _safe_open_check(shard)
    return shard


def _parse_json(raw: bytes, shard: ShardHeader) -> Optional[dict]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        why = f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        why = "JSON nested too deeply to be a header"
    else:
        if isinstance(header, dict):
            return header
        why = f"JSON {type(header).__name__}, not an object"
    shard.findings.append(Finding("header_not_json", shard.label,
                                  f"the {len(raw):,}-byte header is {why}"))
    return None


def _entries(header: dict, shard: ShardHeader) -> None:
    bad: dict[str, str] = {}
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()):
            shard.metadata = dict(meta)
        else:
            bad["__metadata__"] = "must map names to strings"
    for name, info in header.items():
        why = _entry_problem(info)
        if why:
            bad[name] = why
            continue
        begin, end = info["data_offsets"]
        shard.tensors[name] = TensorEntry(name, info["dtype"], tuple(info["shape"]), begin, end)
    shard.invalid = [k for k in bad if k != "__metadata__"]
    if bad:
        details = "; ".join(f"`{k}`: {v}" for k, v in list(bad.items())[:3])
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        shard.findings.append(Finding("header_bad_entry", shard.label,
                                      f"{len(bad)} header entr{'y' if len(bad) == 1 else 'ies'} "
                                      f"invalid: {details}{more}", tensors=bad))


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_problem(info) -> Optional[str]:
    if not isinstance(info, dict):
        return f"a {type(info).__name__}, not an object"
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
    if missing:
        return "missing " + ", ".join(missing)
    if not isinstance(info["dtype"], str) or info["dtype"] not in DTYPE_BITS:
        return f"unknown dtype {info['dtype']!r}"
    shape = info["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        return f"shape {shape!r} is not a list of non-negative integers"
    offsets = info["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        return f"data_offsets {offsets!r} is not two non-negative integers"
    return None


def _layout(shard: ShardHeader) -> None:
    """Sizes against dtype x shape; offsets against each other and the file size."""
    add = shard.findings.append
    entries = list(shard.tensors.values())
    wrong = [t for t in entries if t.begin <= t.end and t.expected_nbytes != t.nbytes]
    if wrong:
        t = wrong[0]
        add(Finding("size_mismatch", shard.label,
                    f"{counted(len(wrong), 'tensor')} whose dtype x shape is not their byte length, e.g. "
                    f"`{t.name}`: {t.dtype} {list(t.shape)} needs {t.expected_nbytes} bytes, "
                    f"its offsets give {t.nbytes}", tensors=[w.name for w in wrong]))
    reversed_ = [t for t in entries if t.begin > t.end]
    ordered = sorted((t for t in entries if t.begin <= t.end), key=lambda t: (t.begin, t.end))
    overlaps, gaps = [], []
    pos, prev = 0, None
    for t in ordered:
        if t.begin < pos:
            overlaps.append((prev.name, t.name))
        elif t.begin > pos:
            gaps.append((pos, t.begin))
        if t.end >= pos:
            pos, prev = t.end, t
    data_len = shard.data_len
    if overlaps:
        a, b = overlaps[0]
        add(Finding("offsets_overlap", shard.label,
                    f"{counted(len(overlaps), 'overlap')}: `{b}` starts inside `{a}`",
                    tensors=sorted({n for pair in overlaps for n in pair})))
    contiguous = not overlaps and not gaps and not reversed_
    if pos > data_len and contiguous:
        cut = [t.name for t in ordered if t.end > data_len]
        add(Finding("truncated_shard", shard.label,
                    f"the file is {shard.size:,} bytes but its header needs {shard.data_start + pos:,} "
                    f"({shard.data_start + pos - shard.size:,} bytes missing): truncated; "
                    f"{counted(len(cut), 'tensor')} cut: {name_some(cut)}", tensors=cut))
    else:
        beyond = [t.name for t in ordered if t.end > data_len]
        if reversed_ or beyond:
            names = [t.name for t in reversed_] + beyond
            what = []
            if reversed_:
                what.append(f"{len(reversed_)} with begin > end")
            if beyond:
                what.append(f"{len(beyond)} ending past the {data_len:,}-byte data buffer")
            add(Finding("offsets_out_of_bounds", shard.label,
                        f"data_offsets out of bounds: {', '.join(what)}: {name_some(names)}",
                        tensors=names))
    if shard.invalid:
        return  # the malformed entries' bytes are unaccounted for: coverage says nothing
    uncovered = list(gaps)
    if pos < data_len:
        uncovered.append((pos, data_len))
    if uncovered:
        total = sum(e - b for b, e in uncovered)
        b, e = uncovered[0]
        add(Finding("offsets_not_covering", shard.label,
                    f"{counted(total, 'byte')} of the data buffer {plural('belongs', total, 'belong')} to no tensor "
                    f"(first: bytes {b:,}..{e:,} of {data_len:,})"))


def _safe_open_check(shard: ShardHeader) -> None:
    """safetensors' own validation, for what the checks above do not know."""
    from safetensors import safe_open

    try:
        with safe_open(str(shard.path), framework="numpy") as fh:
            fh.keys()
    except Exception as exc:  # SafetensorError and anything else: report, never raise
        shard.findings.append(Finding("safetensors_rejects", shard.label,
                                      f"safetensors refuses it: {str(exc).splitlines()[0]}"))
