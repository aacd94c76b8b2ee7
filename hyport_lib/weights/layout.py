"""A checkpoint folder from its headers (:func:`inspect_checkpoint`), reading no tensor
data: every weight file's header, the index and ``config.json`` cross-checked, then the
files against the model class built on the meta device (:mod:`.names`): ZeRO-3
placeholders, weights in no file, tied weights saved under both names.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.checkpoint_files.header import ShardHeader, TensorEntry, read_header
from hyport_lib.utils.bounded_files import kind_of
from hyport_lib.weights.names import ModelNames, model_names
from hyport_lib.utils.wording import counted, plural

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_SHARD_RE = re.compile(r"^(?P<prefix>.+)-\d{5}-of-\d{5}\.safetensors$")


@dataclass
class ConfigInfo:
    present: bool = False
    model_type: Optional[str] = None
    architectures: list[str] = field(default_factory=list)
    dtype: Optional[str] = None
    tie_word_embeddings: Optional[bool] = None
    error: Optional[str] = None


@dataclass
class IndexInfo:
    file: str
    tensors: int = 0
    shards: list[str] = field(default_factory=list)
    weight_map: dict[str, str] = field(default_factory=dict)
    total_size: Optional[int] = None
    total_parameters: Optional[int] = None


@dataclass
class Inspection:
    """What the headers say about one checkpoint (``path``: the folder, or the one file given)."""

    path: str
    kind: str  # sharded | single | file (one file given) | none
    shards: list[ShardHeader] = field(default_factory=list)  # in file-name order
    index: Optional[IndexInfo] = None
    config: ConfigInfo = field(default_factory=ConfigInfo)
    names: ModelNames = field(default_factory=ModelNames)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0  # reading and checking the headers, index and config
    #: building the model class on the meta device (the first time in a process, mostly
    #: importing its transformers module)
    model_seconds: float = 0.0

    @property
    def folder(self) -> Path:
        path = Path(self.path)
        return path.parent if self.kind == "file" else path

    @property
    def tensors(self) -> dict[str, tuple[ShardHeader, TensorEntry]]:
        """Key -> (its file, its entry); a key in two files is the copy the index names
        (the one from_pretrained loads), else the first file's."""
        named = self.index.weight_map if self.index else {}
        out: dict[str, tuple[ShardHeader, TensorEntry]] = {}
        for shard in self.shards:
            for name, entry in shard.tensors.items():
                if name not in out or named.get(name) == shard.label:
                    out[name] = (shard, entry)
        return out

    @property
    def parameters(self) -> int:
        return sum(e.numel for _, e in self.tensors.values())

    @property
    def tied_duplicates(self) -> list[str]:
        """Keys saved for a tied target whose source is saved too."""
        present = {self.names.to_model(k) for k in self.tensors}
        tied = self.names.tied
        return [k for k in self.tensors
                if (m := self.names.to_model(k)) in tied and tied[m] in present]

    @property
    def unique_parameters(self) -> int:
        tensors = self.tensors
        return self.parameters - sum(tensors[k][1].numel for k in self.tied_duplicates)

    @property
    def tensor_bytes(self) -> int:
        return sum(e.size_bytes for _, e in self.tensors.values())


def inspect_checkpoint(path: os.PathLike, *, trust_remote_code: bool = False,
                       with_model: bool = True, validate: bool = True) -> Inspection:
    """``path``: a folder or one ``.safetensors`` file; ``validate``: also let safetensors
    open every file the checks pass. FileNotFoundError when ``path`` does not exist; every
    other problem is a finding."""
    started = time.perf_counter()
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"weights path {str(path)!r}: no such file or folder")
    if path.is_file():
        result = Inspection(str(path), "file", shards=[read_header(path, validate=validate)])
    else:
        result = _inspect_folder(path, validate)
        _read_config(result)
    for shard in result.shards:
        result.findings.extend(shard.findings)
    result.seconds = time.perf_counter() - started
    if result.config.present and not result.config.error and with_model:
        started = time.perf_counter()
        result.names = model_names(result.folder, trust_remote_code=trust_remote_code)
        result.model_seconds = time.perf_counter() - started
        if result.names.error:
            result.findings.append(Finding("model_class_unknown", "config.json",
                                           f"names are used as they are: {result.names.error}"))
    _placeholders(result)
    _absent(result)
    _tied_note(result)
    return result


def _inspect_folder(folder: Path, validate: bool) -> Inspection:
    indexes = sorted(folder.glob("*.safetensors.index.json"),
                     key=lambda p: (p.name != INDEX_FILE, p.name))
    single = folder / SINGLE_FILE
    # transformers looks for model.safetensors before the index, so that is what loads.
    if single.is_file():
        result = Inspection(str(folder), "single", shards=[read_header(single, validate=validate)])
        if indexes:
            result.findings.append(Finding(
                "index_ignored", indexes[0].name,
                f"{SINGLE_FILE} and {indexes[0].name} in one folder: from_pretrained loads "
                f"{SINGLE_FILE} and never reads the index or its shards (left over from an "
                f"earlier save?); only {SINGLE_FILE} is checked"))
        return result
    if indexes:
        return _inspect_sharded(folder, indexes[0], validate)
    files = sorted(folder.glob("*.safetensors"))
    shards = [p for p in files if _SHARD_RE.match(p.name)]
    if shards:
        result = Inspection(str(folder), "sharded", shards=[read_header(p, validate=validate) for p in shards])
        result.findings.append(Finding(
            "index_missing", INDEX_FILE,
            f"{counted(len(shards), 'shard file')} ({name_some([p.name for p in shards])}) but no index: "
            f"from_pretrained fails with 'no file named model.safetensors'"))
        return result
    result = Inspection(str(folder), "none")
    if single.exists() or single.is_symlink():  # there, but no regular file: say what it is
        result.findings.append(Finding("no_weights", SINGLE_FILE,
                                       f"{single} is {_not_a_file(single)}, not a safetensors file"))
        return result
    others = [p.name for p in files] + [p.name for p in sorted(folder.glob("*.bin"))]
    found = f"; found only {name_some(others)}" if others else ""
    result.findings.append(Finding("no_weights", folder.name or str(folder),
                                   f"no {SINGLE_FILE} and no {INDEX_FILE} in {folder}{found}"))
    return result


def _not_a_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a broken link"
    return kind_of(mode) + (" (through a link)" if path.is_symlink() else "")


def _inspect_sharded(folder: Path, index_path: Path, validate: bool) -> Inspection:
    result = Inspection(str(folder), "sharded")
    index = _read_index(index_path, result)
    if index is None:
        return result
    result.index = index
    for name in index.shards:
        shard_path = folder / name
        keys = [k for k, v in index.weight_map.items() if v == name]
        if not shard_path.is_file():
            result.findings.append(Finding(
                "shard_missing", name, f"{index.file} names {name} for {counted(len(keys), 'tensor')} "
                f"({name_some(keys)}) but the file is not in the folder", tensors=keys))
            continue
        result.shards.append(read_header(shard_path, validate=validate))
    prefix = index_path.name[: -len(".safetensors.index.json")]
    named = set(index.shards)
    for extra in sorted(folder.glob(f"{prefix}*.safetensors")):
        if extra.name not in named:
            result.findings.append(Finding(
                "extra_shard", extra.name, f"a weight file that {index.file} does not name: "
                f"its tensors are never loaded (left over from an earlier save?)"))
    _cross_check(result, index)
    return result


def _read_index(path: Path, result: Inspection) -> Optional[IndexInfo]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        weight_map = raw["weight_map"]
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise ValueError("weight_map is not an object of names to file names")
        outside = sorted({v for v in weight_map.values() if Path(v).name != v or v in ("", ".", "..")})
        if outside:
            raise ValueError(f"weight_map names files outside the folder: {', '.join(outside[:3])}")
        meta = raw.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ValueError("metadata is not an object")
        if not weight_map:
            raise ValueError("weight_map names no tensor (from_pretrained cannot load it)")
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError, RecursionError) as exc:
        why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
        result.findings.append(Finding("index_unreadable", path.name, f"cannot use the index: {why}"))
        return None
    # File-name order (model-00001-of-N first), as the files sit on disk; the order of
    # first appearance in weight_map depends on how the saving library sorted the keys.
    shards = sorted(set(weight_map.values()))
    totals = {}
    for name in ("total_size", "total_parameters"):
        value = meta.get(name)
        totals[name] = _count_or_none(value)
        if value is not None and totals[name] is None:
            result.findings.append(Finding(
                "total_size_mismatch", path.name, f"metadata.{name} is {str(value)[:40]!r}, not a count"))
    return IndexInfo(path.name, len(weight_map), shards, dict(weight_map),
                     totals["total_size"], totals["total_parameters"])


def _count_or_none(value) -> Optional[int]:
    """A non-negative whole number (an integral float too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _cross_check(result: Inspection, index: IndexInfo) -> None:
    add = result.findings.append
    holders: dict[str, list[str]] = {}
    for shard in result.shards:
        for key in [*shard.tensors, *shard.invalid]:  # a malformed entry is still there
            holders.setdefault(key, []).append(shard.label)
    readable = {s.label for s in result.shards if s.readable}
    missing: dict[str, list[str]] = {}
    for key, shard in index.weight_map.items():
        if shard in readable and shard not in holders.get(key, []):
            missing.setdefault(shard, []).append(key)
    for shard, keys in missing.items():
        elsewhere = [k for k in keys if holders.get(k)]
        note = ("" if not elsewhere else " (it is in another shard)" if len(keys) == 1 else
                f" ({len(elsewhere)} of them {plural('is', len(elsewhere), 'are')} in another shard)")
        add(Finding("key_missing_from_shard", shard,
                    f"{counted(len(keys), 'key')} the index places in {shard} "
                    f"{plural('is', len(keys), 'are')} not in it{note}: {name_some(keys)}", tensors=keys))
    for shard in result.shards:
        extra = [k for k in shard.tensors if k not in index.weight_map]
        if extra:
            add(Finding("key_not_in_index", shard.label,
                        f"{counted(len(extra), 'key')} of {shard.label} {plural('is', len(extra), 'are')} "
                        f"not in {index.file} "
                        f"(from_pretrained would not load them): {name_some(extra)}", tensors=extra))
    # A key in two shards is blamed on the copy the index does not point to.
    by_file: dict[str, list[str]] = {}
    for key, files in holders.items():
        if len(files) > 1:
            named = index.weight_map.get(key)
            for stray in [f for f in files if f != named] if named in files else files[1:]:
                by_file.setdefault(stray, []).append(key)
    for shard, keys in by_file.items():
        others = sorted({f for k in keys for f in holders[k]} - {shard})
        add(Finding("key_in_two_shards", shard,
                    f"{counted(len(keys), 'key')} also stored in {', '.join(others)}: {name_some(keys)}",
                    tensors=keys))
    if all(s.readable and not s.invalid for s in result.shards) and len(result.shards) == len(index.shards):
        tensors = result.tensors
        indexed = [tensors[k][1] for k in index.weight_map if k in tensors]
        size = sum(e.size_bytes for e in indexed)
        params = sum(e.numel for e in indexed)
        problems = []
        if index.total_size is not None and index.total_size != size:
            problems.append(f"metadata.total_size is {index.total_size:,} but the indexed tensors "
                            f"hold {size:,} bytes")
        if index.total_parameters is not None and index.total_parameters != params:
            problems.append(f"metadata.total_parameters is {index.total_parameters:,} but the "
                            f"indexed tensors hold {params:,} elements")
        if problems:
            add(Finding("total_size_mismatch", index.file, "; ".join(problems)))


def _read_config(result: Inspection) -> None:
    path = result.folder / "config.json"
    info = result.config
    if not path.is_file():
        if result.kind != "none":
            result.findings.append(Finding("config_missing", "config.json",
                                           f"no config.json in {result.folder}: from_pretrained "
                                           f"cannot build the model"))
        return
    info.present = True
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"a JSON {type(raw).__name__}, not an object")
        if not raw.get("model_type"):
            raise ValueError("no model_type")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        info.error = (str(exc).splitlines() or [type(exc).__name__])[0]
        result.findings.append(Finding("config_unreadable", "config.json",
                                       f"config.json cannot be used: {info.error}"))
        return
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    info.model_type = str(raw["model_type"])
    architectures = raw.get("architectures") or []
    if not isinstance(architectures, list):
        # a bare string would be read letter by letter as class names
        result.findings.append(Finding("config_suspect", "config.json",
                                       f"architectures is a {type(architectures).__name__} "
                                       f"({architectures!r}), not a list of class names"))
        architectures = [architectures]
    info.architectures = [str(a) for a in architectures]
    # transformers 5 writes "dtype", 4.x "torch_dtype"; composite models keep it per part.
    info.dtype = raw.get("dtype") or raw.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    info.tie_word_embeddings = raw.get("tie_word_embeddings", text.get("tie_word_embeddings"))


def _placeholders(result: Inspection) -> None:
    expected = result.names.expected
    for shard in result.shards:
        found = []
        for key, entry in shard.tensors.items():
            if not entry.is_float or entry.numel:
                continue
            want = expected.get(result.names.to_model(key))
            if want is not None and math.prod(want) == 0:
                continue  # the model itself has an empty tensor here
            found.append((key, entry, want))
        if found:
            key, entry, want = found[0]
            hint = f" where the model expects {list(want)}" if want else ""
            result.findings.append(Finding(
                "zero3_placeholder", shard.label,
                f"{counted(len(found), 'floating tensor')} with no elements, e.g. `{key}` "
                f"{entry.dtype} {list(entry.shape)}{hint}: ZeRO-3 placeholders saved instead of the "
                f"weights (save with stage3_gather_16bit_weights_on_model_save, or consolidate "
                f"with zero_to_fp32)", tensors=[k for k, _, _ in found]))


def _absent(result: Inspection) -> None:
    """Weights the model class has that no file (and no index entry) holds."""
    names = result.names
    if not names.class_name or not result.shards or result.kind == "file":
        return
    keys = [*result.tensors, *(result.index.weight_map if result.index else ())]
    keys += [k for s in result.shards for k in s.invalid]
    present = {names.to_model(k) for k in keys}
    tied = {**names.tied, **{v: k for k, v in names.tied.items()}}
    optional = [re.compile(p) for p in names.optional]
    absent = [m for m in names.expected if m not in present and tied.get(m) not in present
              and not any(p.search(m) for p in optional)]
    if absent:
        result.findings.append(Finding(
            "weight_missing", result.index.file if result.index else result.shards[0].label,
            f"{counted(len(absent), 'weight')} of {names.class_name} {plural('is', len(absent), 'are')} in no file: "
            f"{name_some(absent)} "
            f"(from_pretrained would initialise them at random)", tensors=absent))


def _tied_note(result: Inspection) -> None:
    dups = result.tied_duplicates
    if dups:
        tensors = result.tensors
        result.findings.append(Finding(
            "tied_duplicate", tensors[dups[0]][0].label,
            f"{counted(len(dups), 'tied weight')} saved under both names ({name_some(dups)}); the "
            f"parameter total without them is {result.unique_parameters:,}", tensors=dups))


def shard_rows(result: Inspection) -> list[dict]:
    rows = []
    for shard in result.shards:
        dtypes = Counter(e.dtype for e in shard.tensors.values())
        rows.append({
            "file": shard.label, "bytes": shard.size, "tensors": len(shard.tensors),
            "dtypes": ", ".join(f"{d}×{n}" for d, n in dtypes.most_common()),
            "parameters": shard.parameters, "header bytes": shard.header_len,
            "ok": shard.ok})
    return rows
