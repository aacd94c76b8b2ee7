"""Reading a dataset file into raw records: a JSON list, JSON Lines, or parquet (docs/datasets.md,
"File types"). Files are opened through :mod:`hyport_lib.utils.bounded_files` (a FIFO or device is
refused, never waited on); a JSON list is parsed whole, so its size is bounded; JSON Lines and
parquet are read record by record.
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from hyport_lib.utils.bounded_files import FileTooLarge, UnreadableFile, check_regular, open_regular, read_bytes

#: Rows per parquet record batch: bounded memory whatever the file's size.
PARQUET_BATCH_ROWS = 1024
PARQUET_SUFFIXES = (".parquet", ".pq")
#: Kinds LLaMA-Factory reads that hyport does not (said up front, rather than reported as
#: every line being "not JSON").
UNREAD_SUFFIXES = {".csv": "CSV", ".tsv": "TSV", ".arrow": "Arrow", ".txt": "plain text"}
_PARQUET_MAGIC = b"PAR1"
#: A JSON list is parsed whole (its records take several times its size in memory):
#: larger files are refused with the fix (JSON Lines or parquet, read record by record).
MAX_JSON_LIST_BYTES = 2 * 2**30
#: The longest JSON Lines line read: a record longer than this (a quarter of a billion
#: characters) is far past any max_seq_len, and holding it would take gigabytes.
MAX_JSON_LINE_CHARS = 256 * 2**20
#: A line over the bound is passed over in pieces of this many characters.
_SKIP_CHARS = 2**20


class _DuplicateKeys(dict):
    """A JSON object in which a key appeared more than once (json keeps the last value silently:
    a ``duplicate_key`` problem of its record); ``duplicates`` names those keys."""

    duplicates: list


def json_object_pairs(pairs: list) -> dict:
    """json's ``object_pairs_hook``: a plain dict, or a :class:`_DuplicateKeys` when a key repeats."""
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    marked = _DuplicateKeys(value)
    seen: set = set()
    marked.duplicates = [key for key, _ in pairs if key in seen or seen.add(key)]
    return marked


def duplicate_key_paths(value: Any, path: str = "") -> list[str]:
    """Where in ``value`` (read by this module) a key appeared twice: ``conversations[0].value``
    (a key of the record itself: its name alone)."""
    found: list[str] = []
    if isinstance(value, dict):
        if isinstance(value, _DuplicateKeys):
            found += [f"{path}.{key}" if path else str(key) for key in dict.fromkeys(value.duplicates)]
        for key, inner in value.items():
            if isinstance(inner, (dict, list)):
                found += duplicate_key_paths(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            if isinstance(inner, (dict, list)):
                found += duplicate_key_paths(inner, f"{path}[{i}]")
    return found


class _NotJsonConstant(ValueError):
    """``NaN`` / ``Infinity`` / ``-Infinity``: Python's json module reads them, JSON has none."""


def _refuse_constant(name: str):
    raise _NotJsonConstant(f"{name} is not JSON (a number there must be finite; strings need quotes)")


def _loads(text: str):
    """Strict JSON: the non-standard constants are refused, not read as floats; an object
    with a repeated key comes back marked (:func:`duplicate_key_paths` finds it)."""
    return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=json_object_pairs)


def file_kind(path: os.PathLike) -> str:
    """``json``, ``jsonl`` or ``parquet``: what :func:`iter_raw` will read ``path`` as.
    Raises ValueError for a kind hyport does not read (CSV, Arrow) or an unreadable file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in UNREAD_SUFFIXES:
        raise ValueError(f"dataset {path}: {UNREAD_SUFFIXES[suffix]} files are not read by hyport; "
                         f"convert it to JSON, JSON Lines or parquet")
    try:
        with open_regular(path) as fh:
            head = fh.read(4096)
    except UnreadableFile as exc:
        raise ValueError(f"dataset {exc}") from None
    except OSError as exc:
        raise ValueError(f"dataset {path}: cannot read it ({exc})") from exc
    if suffix in PARQUET_SUFFIXES or head.startswith(_PARQUET_MAGIC):
        return "parquet"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    return "json" if text.startswith("[") else "jsonl"


#: ``(field, message)`` of a record that is not JSON (a JSON Lines line), else None.
Unreadable = Optional[tuple[str, str]]


def iter_raw(path: os.PathLike) -> Iterator[tuple[Any, Unreadable]]:
    """The file's records in order: ``(value, None)``, or ``(None, ("line N", message))`` for a
    JSON Lines line that is not JSON (blank lines do not count). ValueError naming the file when it
    cannot be read as a whole."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "parquet":
        yield from _iter_parquet(path)
    elif kind == "json":
        yield from ((value, None) for value in _read_json_list(path))
    else:
        yield from _iter_json_lines(path)


def _over_list_bound(path: Path) -> None:
    """:class:`FileTooLarge` from the file's size, before reading it (that would hold up to the
    bound in memory for nothing)."""
    if check_regular(path).st_size > MAX_JSON_LIST_BYTES:
        raise FileTooLarge(path, f"larger than {MAX_JSON_LIST_BYTES / 2**30:g} GiB, the most hyport reads of "
                                 "such a file", errno.EFBIG)


def _read_text(path: Path) -> str:
    try:
        _over_list_bound(path)
        data = read_bytes(path, MAX_JSON_LIST_BYTES)
    except UnreadableFile as exc:
        fix = ("; a JSON list is parsed whole: write it as JSON Lines (one record per line) or parquet, "
               "which are read record by record" if exc.errno == errno.EFBIG else "")
        raise ValueError(f"dataset {exc}{fix}") from None
    try:
        return data.decode("utf-8-sig")  # a BOM (Windows editors) is not data
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset {path}: cannot read it ({exc})") from None


def _read_json_list(path: Path) -> list:
    try:
        data = _loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"dataset {path}: not valid JSON at line {exc.lineno}, column "
                         f"{exc.colno} ({exc.msg})") from None
    except _NotJsonConstant as exc:
        raise ValueError(f"dataset {path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"dataset {path}: nested too deeply to read (arrays or objects inside "
                         f"each other beyond Python's recursion limit); a record is a flat object") from None
    if isinstance(data, list) and not data:
        raise ValueError(f"dataset {path}: holds no records (an empty JSON list)")
    return list(data)


def _one_object_error(path: Path) -> Optional[ValueError]:
    """One object over many lines, e.g. ``{"data": [...]}``: said as such, rather than
    every line of it reported as a record that is not JSON."""
    try:  # (larger than a JSON list may be: not one object hyport could read; its lines are the problems)
        text = _read_text(path)
        whole = _loads(text)
    except (ValueError, RecursionError):  # unreadable, not JSON, NaN
        return None
    if isinstance(whole, dict) and text.strip().count("\n"):
        keys = ", ".join(repr(k) for k in list(whole)[:3])
        return ValueError(f"dataset {path}: one JSON object (keys {keys}); expected a JSON list "
                          f"of records, or one record per line (JSON Lines)")
    return None


def _iter_json_lines(path: Path) -> Iterator[tuple[Any, Unreadable]]:
    """The lines as records; lines that are not JSON wait until one line is, so that a
    file with no JSON line at all (CSV or YAML under a .json name) is one error, not one
    problem per line. (A line that is JSON apart from ``NaN`` or its depth counts as JSON:
    the file is JSON Lines, that record is wrong.)"""
    count = 0
    waiting: list[tuple[Any, Unreadable]] = []  # not-JSON lines before the first JSON one
    seen_json = False
    first_bad = ""  # where the first line that is not JSON fails, and why
    try:
        with io.TextIOWrapper(open_regular(path), encoding="utf-8-sig") as fh:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_JSON_LINE_CHARS + 1), ""), 1):
                if len(line) > MAX_JSON_LINE_CHARS and not line.endswith("\n"):
                    while line and not line.endswith("\n"):  # passed over, never held whole
                        line = fh.readline(_SKIP_CHARS)
                    why = (f"longer than {MAX_JSON_LINE_CHARS:,} characters, not read (a JSON Lines record is "
                           "one line; is this a file without line breaks?)")
                    value, problem = None, (f"line {number}", why)
                    first_bad = first_bad or f"line {number}: {why}"
                else:
                    if not line.strip():
                        continue
                    try:  # without its line break: a column past the end is said as on this line
                        value, problem = _loads(line.rstrip("\r\n")), None
                    except (_NotJsonConstant, RecursionError) as exc:
                        why = str(exc) if isinstance(exc, _NotJsonConstant) else "nested too deeply to read"
                        value, problem = None, (f"line {number}", f"not JSON ({why})")
                        seen_json = True
                    except json.JSONDecodeError as exc:
                        value, problem = None, (f"line {number}", f"not JSON ({exc.msg}; column {exc.colno})")
                        first_bad = first_bad or f"line {number}: {exc.msg}, column {exc.colno}"
                    else:
                        seen_json = True
                    if problem is not None and count == 0 and line.lstrip().startswith("{"):
                        error = _one_object_error(path)
                        if error is not None:
                            raise error
                count += 1
                if not seen_json:
                    waiting.append((value, problem))
                    continue
                yield from waiting
                waiting = []
                yield value, problem
    except UnreadableFile as exc:
        raise ValueError(f"dataset {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset {path}: cannot read it ({exc})") from exc
    if count == 0:
        raise ValueError(f"dataset {path}: holds no records")
    if waiting:
        raise ValueError(f"no line of dataset {path} is JSON ({first_bad}): is it CSV or YAML? hyport reads "
                         "a JSON list of records, JSON Lines (one JSON object per line) or parquet")


def _iter_parquet(path: Path) -> Iterator[tuple[Any, Unreadable]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = open_regular(path)
    except UnreadableFile as exc:
        raise ValueError(f"dataset {exc}") from None
    with handle:
        try:
            parquet = pq.ParquetFile(handle)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"dataset {path}: not a readable parquet file ({_first_line(exc)})") from None
        if parquet.metadata.num_rows == 0:
            raise ValueError(f"dataset {path}: holds no records")
        rows = 0
        try:
            for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                for row in batch.to_pylist():
                    yield row, None
                rows += batch.num_rows
        # pyarrow raises OSError (not ArrowException) for corrupt pages: snappy's
        # "Corrupt snappy compressed data", a page header that does not deserialise.
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"dataset {path}: parquet data cannot be read from row {rows} on"
                             f"{_broken_column(parquet, rows)} ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (pyarrow's span several)."""
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _broken_column(parquet, first_row: int) -> str:
    """`` (column 'output', row group 2)``: the first column of the row group holding
    ``first_row`` that cannot be read alone, or "" when none fails alone."""
    import pyarrow as pa

    start = 0
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if start + size > first_row:
            for name in parquet.schema_arrow.names:
                try:
                    parquet.read_row_group(group, columns=[name])
                except (pa.ArrowException, OSError):
                    return f" (column {name!r}, row group {group})"
            return ""
        start += size
    return ""
