"""The smoke-training dataset: reading it and finding every malformed record up front.

The format is the seed's ``test_data_packing.json``: a JSON list (or JSON Lines, one
object per line) of records::

    {"id": "sample-3",
     "image": "images/a.png" | ["a.png", "b.png"] | absent,
     "conversations": [{"from": "human", "value": "<image>\\nWhat is shown?"},
                       {"from": "gpt", "value": "A red circle."}, ...]}

Image paths are relative to ``image_root`` (default: the dataset file's folder). Each
``<image>`` in the human turns takes the next image of the record, in order.

:func:`validate_records` checks structure and images; the length check needs the
tokenizer and lives in :mod:`hyport_lib.train.samples`. Every problem names the
record (its index and id), the field and what is wrong, so a bad dataset is reported
in full before any training process starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

IMAGE_PLACEHOLDER = "<image>"
ROLES = {"human": "user", "gpt": "assistant"}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one record.

    Attributes:
        index: position of the record in the file (0-based; JSON Lines: line - 1).
        record_id: its ``id`` (None when it has none).
        field: where in the record, e.g. ``conversations[2].from``.
        kind: a stable name: ``not_json``, ``not_object``, ``missing_id``, ``duplicate_id``,
            ``missing_conversations``, ``empty_conversations``, ``unknown_role``,
            ``first_turn_not_human``, ``roles_not_alternating``, ``empty_value``,
            ``no_answer``, ``image_in_answer``, ``image_count``, ``image_missing``,
            ``image_unreadable``, ``too_long``, ``encode_failed``.
        message: one line a user can act on.
    """

    index: int
    record_id: Optional[str]
    field: str
    kind: str
    message: str

    def __str__(self) -> str:
        who = f"record {self.index}" + (f" (id {self.record_id!r})" if self.record_id is not None else "")
        return f"{who}, {self.field}: {self.message}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Record:
    """A record that passed validation: its turns and its images (absolute paths)."""

    index: int
    record_id: str
    turns: list[tuple[str, str]]  # (role, text) with role "user" / "assistant"
    images: list[str] = field(default_factory=list)


@dataclass
class DatasetReport:
    """What :func:`load_dataset` read: the good records and every problem found."""

    path: str
    records: list[Record]
    problems: list[Problem]
    total: int

    @property
    def bad_indices(self) -> set[int]:
        return {p.index for p in self.problems}

    def summary(self) -> str:
        bad = len(self.bad_indices)
        return (f"{self.total} records in {self.path}: {self.total - bad} good, {bad} with "
                f"problems ({len(self.problems)} problems)")

    def to_dict(self) -> dict:
        return {"path": self.path, "total": self.total, "good": len(self.records),
                "problems": [p.to_dict() for p in self.problems]}


class DatasetError(ValueError):
    """The dataset has problems and ``skip_bad_records`` is off: the first ``limit``
    problems are listed in the message, every one is in ``report.problems`` (nothing is
    written: the plan that finds them leaves no file behind)."""

    def __init__(self, report: DatasetReport, limit: int = 50):
        self.report = report
        #: One line per problem (the command line prints them under the message).
        self.details = [f"- {p}" for p in report.problems[:limit]]
        more = len(report.problems) - limit
        if more > 0:
            self.details.append(f"... and {more} more (fix these first, or skip_bad_records=True: a run "
                                "that skips them lists every one in output_dir/dataset_problems.jsonl)")
        super().__init__(f"{report.summary()}; fix them or set skip_bad_records=True:\n"
                         + "\n".join(f"  {line}" for line in self.details))


class _NotJsonConstant(ValueError):
    """``NaN`` / ``Infinity`` / ``-Infinity``: Python's json module reads them, JSON has none."""


def _refuse_constant(name: str):
    raise _NotJsonConstant(f"{name} is not JSON (a number there must be finite; strings need quotes)")


def _loads(text: str):
    """Strict JSON: the non-standard constants are refused, not read as floats."""
    return json.loads(text, parse_constant=_refuse_constant)


def read_raw(path: os.PathLike) -> tuple[list[Any], list[Problem]]:
    """The file's records as parsed JSON values, and the lines that are not JSON.

    A file whose first non-blank character is ``[`` is one JSON list; otherwise each
    non-blank line is one JSON value (JSON Lines).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is not data
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"dataset {path}: cannot read it ({exc})") from exc
    if text.lstrip().startswith("{"):
        # One object over many lines, e.g. {"data": [...]}: say so, rather than report
        # every line of it as a record that is not JSON.
        try:
            whole = _loads(text)
        except (json.JSONDecodeError, _NotJsonConstant, RecursionError):
            whole = None
        if isinstance(whole, dict) and text.strip().count("\n"):
            keys = ", ".join(repr(k) for k in list(whole)[:3])
            raise ValueError(f"dataset {path}: one JSON object (keys {keys}); expected a JSON list "
                             f"of records, or one record per line (JSON Lines)")
    if text.lstrip().startswith("["):
        try:
            data = _loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"dataset {path}: not valid JSON at line {exc.lineno}, column "
                             f"{exc.colno} ({exc.msg})") from None
        except _NotJsonConstant as exc:
            raise ValueError(f"dataset {path}: {exc}") from None
        except RecursionError:
            raise ValueError(f"dataset {path}: nested too deeply to read (arrays or objects inside "
                             f"each other beyond Python's recursion limit); a record is a flat object") from None
        return list(data), []
    values: list[Any] = []
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(_loads(line))
        except (_NotJsonConstant, RecursionError) as exc:
            values.append(None)
            why = str(exc) if isinstance(exc, _NotJsonConstant) else "nested too deeply to read"
            problems.append(Problem(len(values) - 1, None, f"line {number}", "not_json", f"not JSON ({why})"))
        except json.JSONDecodeError as exc:
            values.append(None)
            problems.append(Problem(len(values) - 1, None, f"line {number}", "not_json",
                                    f"not JSON ({exc.msg} at column {exc.colno})"))
    if not values:
        raise ValueError(f"dataset {path}: holds no records")
    return values, problems


def load_dataset(path: os.PathLike, image_root: Optional[os.PathLike] = None,
                 check_images: bool = True) -> DatasetReport:
    """Read and validate a dataset file; see the module docstring.

    Args:
        path: the JSON or JSON Lines file.
        image_root: folder image paths are relative to (default: the file's folder).
        check_images: open every image (PIL ``verify``) to find unreadable ones.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise IsADirectoryError(f"dataset_path={str(path)!r} is a folder: give the JSON / JSON Lines "
                                f"file itself")
    if not path.is_file():
        raise FileNotFoundError(f"dataset_path={str(path)!r}: no such file")
    root = Path(image_root).expanduser() if image_root else path.parent
    values, problems = read_raw(path)
    not_json = {p.index for p in problems}
    records: list[Record] = []
    seen_ids: dict[str, int] = {}
    for index, value in enumerate(values):
        if index in not_json:
            continue
        found, record = validate_record(index, value, root, check_images)
        record_id = record.record_id if record else None
        if record_id is not None and record_id in seen_ids:
            found.append(Problem(index, record_id, "id", "duplicate_id",
                                 f"id {record_id!r} is already used by record {seen_ids[record_id]}"))
        elif record_id is not None:
            seen_ids[record_id] = index
        problems += found
        if record is not None and not found:
            records.append(record)
    problems.sort(key=lambda p: p.index)
    return DatasetReport(str(path), records, problems, len(values))


def validate_record(index: int, value: Any, image_root: Path,
                    check_images: bool = True) -> tuple[list[Problem], Optional[Record]]:
    """Every problem of one record, and the record (None when it cannot be read at all)."""
    if not isinstance(value, dict):
        return [Problem(index, None, "(record)", "not_object",
                        f"expected a JSON object, got {type(value).__name__}")], None
    problems: list[Problem] = []
    raw_id = value.get("id")
    record_id = None if raw_id is None or str(raw_id).strip() == "" else str(raw_id)

    def problem(where: str, kind: str, message: str) -> None:
        problems.append(Problem(index, record_id, where, kind, message))

    if record_id is None:
        problem("id", "missing_id", "missing or empty id")
    turns = _check_turns(value, problem)
    images = _check_images(value, image_root, problem, check_images)
    placeholders = sum(text.count(IMAGE_PLACEHOLDER) for _, text in turns)
    if images is not None and placeholders != len(images):
        problem("image", "image_count", f"{placeholders} {IMAGE_PLACEHOLDER} placeholder(s) in the "
                                        f"conversations but {len(images)} image(s)")
    return problems, Record(index, record_id or f"#{index}", turns, images or [])


def _check_turns(value: dict, problem) -> list[tuple[str, str]]:
    conversations = value.get("conversations")
    if conversations is None:
        problem("conversations", "missing_conversations", "missing")
        return []
    if not isinstance(conversations, list) or not conversations:
        problem("conversations", "empty_conversations", "must be a non-empty list of turns")
        return []
    turns = []
    expected = "human"
    previous = None
    for i, turn in enumerate(conversations):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            problem(where, "unknown_role", f"expected {{'from': ..., 'value': ...}}, got {turn!r:.60}")
            previous = None
            continue
        role, text = turn.get("from"), turn.get("value")
        if not isinstance(role, str) or role not in ROLES:
            problem(f"{where}.from", "unknown_role", f"role {role!r}: expected 'human' or 'gpt'")
        elif i == 0 and role != "human":
            problem(f"{where}.from", "first_turn_not_human", f"the first turn is {role!r}; "
                                                             "it must be 'human'")
        elif role != expected:
            problem(f"{where}.from", "roles_not_alternating",
                    f"{role!r} follows {previous!r}; human and gpt turns must alternate")
        previous = role
        if not isinstance(text, str) or not text.strip():
            problem(f"{where}.value", "empty_value", "empty or missing text")
            text = ""
        elif role == "gpt" and IMAGE_PLACEHOLDER in text:
            problem(f"{where}.value", "image_in_answer",
                    f"{IMAGE_PLACEHOLDER} in a gpt turn: images belong to the human turns")
        if isinstance(role, str) and role in ROLES:
            turns.append((ROLES[role], text))
            expected = "gpt" if role == "human" else "human"
    # (a last turn of an unknown role is that problem already, not a missing answer)
    if turns and turns[-1][0] != "assistant" and previous == "human":
        problem(f"conversations[{len(conversations) - 1}]", "no_answer",
                "the last turn is 'human': there is no answer to learn")
    return turns


def _check_images(value: dict, image_root: Path, problem, check: bool) -> Optional[list[str]]:
    raw = value.get("image")
    if raw is None:
        return []
    entries = raw if isinstance(raw, list) else [raw]
    images = []
    for i, entry in enumerate(entries):
        where = "image" if not isinstance(raw, list) else f"image[{i}]"
        if not isinstance(entry, str) or not entry.strip():
            problem(where, "image_missing", f"expected a file path, got {entry!r}")
            continue
        path = (image_root / entry).expanduser()
        try:
            found, exists = path.is_file(), path.exists()
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte: not a file either
            problem(where, "image_missing", f"{entry!r:.80}: not a usable path ({exc})")
            continue
        if not found:
            what = ("a folder, not an image file" if path.is_dir() else
                    "not a regular file (a pipe, device or socket)" if exists else
                    f"no such file under {image_root}")
            problem(where, "image_missing", f"{entry!r:.200}: {what}")
            continue
        if check:
            reason = _unreadable(path)
            if reason:
                problem(where, "image_unreadable", f"{entry!r}: not a readable image ({reason})")
                continue
        images.append(str(path))
    return images if len(images) == len(entries) else None


def _unreadable(path: Path) -> Optional[str]:
    from PIL import Image, UnidentifiedImageError

    try:  # DecompressionBombError: an image so large that opening it would exhaust memory
        with Image.open(path) as img:
            img.verify()  # the structure
        with Image.open(path) as img:
            img.load()  # the pixels: verify() does not read a JPEG's image data
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError,
            Image.DecompressionBombError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:80]}"
    return None
