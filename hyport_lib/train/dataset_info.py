"""LLaMA-Factory's ``dataset_info.json``: one named entry, read as LLaMA-Factory reads it
(``DatasetAttr.join``); whatever would download data or train other than supervised answers is
refused in one line naming the entry and the field (docs/datasets.md, "LLaMA-Factory's
dataset_info.json").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hyport_lib.train.dataset_files import duplicate_key_paths, json_object_pairs
from hyport_lib.train.dataset_formats import (ALPACA_COLUMNS, FORMATS, MESSAGE_COLUMNS, SHAREGPT_TAGS, TAG_NAMES,
                                              UNSUPPORTED_COLUMNS, DatasetLayout, multiple_entries_message)
from hyport_lib.utils.bounded_files import NotARegularFile, UnreadableFile, check_regular, read_bytes

INFO_FILE = "dataset_info.json"
#: A dataset_info.json lists entries (a few KB); anything larger is not one.
MAX_INFO_BYTES = 16 * 2**20
#: LLaMA-Factory's ``DatasetAttr`` defaults: an entry without ``columns`` gets these (and without
#: ``tags``, sharegpt's), whatever its formatting; an entry with them starts from None (``join``).
#: (``id`` is hyport's own column: an entry reads one only when its ``columns`` name it, since
#: LLaMA-Factory reads none and its datasets may repeat or lack one.)
ENTRY_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": None,
                 "messages": "conversations", "system": None, "images": None, "id": None}
#: Names an entry must leave set (with what LLaMA-Factory reads without them).
_NEEDED_COLUMNS = {"alpaca": {"response": "no answer (an unsupervised record; hyport trains answers)"},
                   "message": {"messages": "no turns"}}
#: LLaMA-Factory's ``openai`` converter changes the system prompt; hyport does not.
OPENAI_CAVEAT = ("formatting 'openai': LLaMA-Factory appends 'detailed thinking off' to every system prompt "
                 "(it is the whole system prompt of a record without one) unless the record has tools; hyport "
                 "trains on the system prompts as written")
_NEEDED_TAGS = {"role_tag": "no role", "content_tag": "no text", "user_tag": "no user turn",
                "assistant_tag": "no assistant turn"}
_DOWNLOADS = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")
_REFUSED_KEYS = {"num_samples": "hyport trains max_steps over the whole file; remove num_samples",
                 "subset": "subsets belong to hub datasets; a local file has none",
                 "folder": "folders belong to hub datasets; name the file in file_name"}
_KNOWN_KEYS = {"file_name", "formatting", "columns", "tags", "split", "ranking"} | set(_REFUSED_KEYS) | set(_DOWNLOADS)


@dataclass(frozen=True)
class DatasetEntry:
    """One ``dataset_info.json`` entry, resolved (``info_path`` and ``data_file`` absolute)."""

    name: str
    info_path: Path
    data_file: Path
    layout: DatasetLayout


def info_file(path: os.PathLike) -> Path:
    path = Path(path).expanduser()
    return path / INFO_FILE if path.is_dir() else path


def read_entry(path: os.PathLike, name: str) -> DatasetEntry:
    """The entry ``name`` of the ``dataset_info.json`` at ``path`` (or in folder ``path``).
    Raises FileNotFoundError (no json, no data file) or ValueError (naming what cannot be used)."""
    if "," in name:
        raise ValueError(multiple_entries_message(name))
    info = info_file(path).resolve()
    if not info.exists():
        raise FileNotFoundError(f"dataset_path={str(path)!r}: no {INFO_FILE} there (dataset={name!r} names an "
                                f"entry of a {INFO_FILE})")
    # a file of another name may be the data itself, given by mistake with dataset set
    data_hint = "" if info.name == INFO_FILE else f"; {_names_the_info_file(name)}"
    try:
        entries = json.loads(read_bytes(info, MAX_INFO_BYTES).decode("utf-8-sig"),
                             object_pairs_hook=json_object_pairs)
    except (OSError, UnicodeDecodeError) as exc:  # UnreadableFile: a FIFO, too large; one line naming the file
        said = str(exc) if isinstance(exc, UnreadableFile) else f"{info}: cannot read it ({exc})"
        raise ValueError(f"{said}{data_hint}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{info}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
                         f"{data_hint}") from None
    repeated = duplicate_key_paths(entries)
    if repeated:
        raise ValueError(f"{info}: the key {repeated[0]!r} appears more than once in its object (JSON keeps only "
                         "the last one, silently); keep one")
    if isinstance(entries, list):
        raise ValueError(f"{info}: a JSON list (records, not a {INFO_FILE}'s named entries); "
                         f"{_names_the_info_file(name)}")
    if not isinstance(entries, dict):
        raise ValueError(f"{info}: expected a JSON object of named entries, got {type(entries).__name__}")
    if name not in entries:
        listed = ", ".join(repr(k) for k in list(entries)[:10]) or "none"
        raise ValueError(f"dataset={name!r}: no such entry in {info} (entries: {listed})")
    entry = entries[name]

    def refuse(field: str, why: str, kind: type = ValueError) -> Exception:
        return kind(f"{info}, entry {name!r}, {field}: {why}")

    if not isinstance(entry, dict):
        raise refuse("(entry)", f"expected an object, got {type(entry).__name__}")
    for key in _DOWNLOADS:
        if key in entry:
            raise refuse(key, "hyport reads local files only and downloads nothing; download the data and "
                              "name it in file_name")
    for key, why in _REFUSED_KEYS.items():
        if entry.get(key) is not None:
            raise refuse(key, why)
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise refuse(unknown[0], f"not a field of a {INFO_FILE} entry hyport knows")
    if entry.get("ranking"):
        raise refuse("ranking", "preference (ranking) data is not trained by hyport's supervised smoke training")
    if entry.get("split", "train") != "train":
        raise refuse("split", f"{entry['split']!r}: a local file has only the 'train' split")
    format = entry.get("formatting", "alpaca")
    if format not in FORMATS:
        raise refuse("formatting", f"{format!r}: expected one of {', '.join(FORMATS)}")
    columns = _names(entry, "columns", refuse)
    tags = _names(entry, "tags", refuse)
    allowed = ALPACA_COLUMNS if format == "alpaca" else MESSAGE_COLUMNS
    for key in columns:
        if key in UNSUPPORTED_COLUMNS:
            if columns[key] is not None:  # null: not read, as in LLaMA-Factory, so nothing unsupported is used
                raise refuse(f"columns.{key}", f"{UNSUPPORTED_COLUMNS[key]} are not supported; leave it out "
                                               "or set it to null (not read)")
            continue
        if key not in set(ALPACA_COLUMNS) | set(MESSAGE_COLUMNS):
            raise refuse(f"columns.{key}", "not a column LLaMA-Factory defines")
        if key not in allowed and columns[key] is not None:
            raise refuse(f"columns.{key}", f"not a column of the {format} formatting ({', '.join(allowed)})")
    for key in tags:
        if key not in TAG_NAMES:
            raise refuse(f"tags.{key}", f"not a tag ({', '.join(TAG_NAMES)})")
    data_file = _data_file(info, entry, refuse)
    return DatasetEntry(name, info, data_file, _layout(name, entry, format, columns, tags, refuse))


def _names_the_info_file(name: str) -> str:
    """What ``dataset_path`` names when ``dataset`` is set, and without it."""
    return (f"with dataset={name!r} set, dataset_path names the {INFO_FILE} (or its folder) that holds the "
            "entry; without dataset, dataset_path is read as the data itself")


def _layout(name: str, entry: dict, format: str, columns: dict, tags: dict, refuse) -> DatasetLayout:
    """The entry's names as ``DatasetAttr.join`` sets them: an entry with ``columns`` (or
    ``tags``) has only the names it gives; one without has the defaults."""
    allowed = ALPACA_COLUMNS if format == "alpaca" else MESSAGE_COLUMNS
    base = dict.fromkeys(ENTRY_COLUMNS) if "columns" in entry else ENTRY_COLUMNS
    merged = {k: v for k, v in {**base, **columns}.items() if k in allowed}
    for key, without in _NEEDED_COLUMNS["alpaca" if format == "alpaca" else "message"].items():
        if not merged.get(key):
            raise refuse(f"columns.{key}", f"not named (LLaMA-Factory reads {without} without it)")
    if format == "alpaca":
        if not merged.get("prompt") and not merged.get("query"):
            raise refuse("columns.prompt", "not named, nor columns.query (LLaMA-Factory reads no prompt without "
                                           "one of them)")
        return DatasetLayout(format, merged, {}, f"{INFO_FILE} entry {name!r}")
    merged_tags = {**(dict.fromkeys(TAG_NAMES) if "tags" in entry else SHAREGPT_TAGS), **tags}
    for key, without in _NEEDED_TAGS.items():
        if not merged_tags.get(key):
            raise refuse(f"tags.{key}", f"not named (LLaMA-Factory reads {without} without it)")
    return DatasetLayout(format, merged, merged_tags, f"{INFO_FILE} entry {name!r}",
                         OPENAI_CAVEAT if format == "openai" else None)


def _names(entry: dict, key: str, refuse) -> dict:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise refuse(key, f"expected an object of names, got {type(value).__name__}")
    for name, column in value.items():
        if column is not None and (not isinstance(column, str) or not column.strip()):
            raise refuse(f"{key}.{name}", f"{column!r}: expected a name (text)")
    return dict(value)


def _data_file(info: Path, entry: dict, refuse) -> Path:
    name = entry.get("file_name")
    if not isinstance(name, str) or not name.strip():
        raise refuse("file_name", "missing: name the data file (relative to the json's folder)")
    if "\0" in name:
        raise refuse("file_name", f"{name!r:.120}: not a usable path (a NUL byte)")
    path = (info.parent / name).expanduser().resolve()
    if path.is_dir():
        raise refuse("file_name", f"{name!r} is a folder: hyport reads one file (JSON, JSON Lines or parquet)")
    try:
        check_regular(path)
    except NotARegularFile as exc:  # a FIFO would block the reading, a device never end it
        raise refuse("file_name", f"{name!r} ({path}): {exc.reason}") from None
    except UnreadableFile as exc:
        why = f"no such file in {info.parent}" if exc.reason == "no such file" else exc.reason
        raise refuse("file_name", f"{name!r}: {why}", FileNotFoundError) from None
    return path
