"""The smoke-training dataset read into :class:`Record` objects, every malformed record named as a
:class:`Problem` before any training process starts (the length check needs the tokenizer:
:mod:`hyport_lib.train.samples`), and the progress of reading it (minutes for 100,000 records on a
CPU): the readers report to the ``on_progress`` they are given or to the one :func:`reporting_to`
sets for a block (the stage contract's ``plan(params)`` takes no callback, so ``hyport train``
wraps it in ``with reporting_to(bar):``); elsewhere reading is silent.
"""

from __future__ import annotations

import functools
import os
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from hyport_lib.train.dataset_convert import convert, image_column, record_id_of, unsupported_columns
from hyport_lib.train.dataset_files import duplicate_key_paths, iter_raw
from hyport_lib.train.dataset_formats import (DETECT_LIMIT, IMAGE_PLACEHOLDER, DatasetLayout, DatasetOptions,
                                              UndetectedFormat, resolve_layout)
from hyport_lib.train.dataset_images import Problem as ImageProblem
from hyport_lib.train.dataset_images import image_problem
from hyport_lib.train.dataset_info import read_entry
from hyport_lib.utils.bounded_files import NotARegularFile, UnreadableFile, check_regular
from hyport_lib.utils.wording import counted, plural

#: A problem's message is cut to this many characters (it may quote a value of any size).
MAX_MESSAGE_CHARS = 240
MAX_ID_CHARS = 80
#: How to do without ids, said where they are refused (they only name records).
NO_IDS = ("ids only name records: to name them by position instead, leave the id column out "
          "(dataset_columns={'id': None}, null in YAML; for a dataset_info.json entry, no 'id' in its columns)")
#: The least time between two progress reports (a report per record would cost more
#: than the record).
TICK_SECONDS = 0.5


@dataclass(frozen=True)
class DatasetProgress:
    """Where the reading (``phase``: ``reading dataset`` or ``tokenising dataset``) of the data
    file ``path`` stands; ``total`` is None while reading a file (known at the end)."""

    phase: str
    done: int
    total: Optional[int]
    path: str


OnProgress = Callable[[DatasetProgress], None]

_REPORT_TO: ContextVar[Optional[OnProgress]] = ContextVar("hyport_dataset_progress", default=None)


@contextmanager
def reporting_to(on_progress: OnProgress) -> Iterator[None]:
    token = _REPORT_TO.set(on_progress)
    try:
        yield
    finally:
        _REPORT_TO.reset(token)


class ProgressTicker:
    """Calls ``on_progress`` (None: the one :func:`reporting_to` set, if any) at the start,
    at most every :data:`TICK_SECONDS`, and at the end."""

    def __init__(self, on_progress: Optional[OnProgress], phase: str, path: str, total: Optional[int] = None):
        self.on_progress = on_progress if on_progress is not None else _REPORT_TO.get()
        self.phase, self.path, self.total = phase, path, total
        self._last = 0.0
        if self.on_progress is not None:
            self._report(0)

    def _report(self, done: int) -> None:
        self._last = time.monotonic()
        self.on_progress(DatasetProgress(self.phase, done, self.total, self.path))

    def tick(self, done: int) -> None:
        if self.on_progress is not None and time.monotonic() - self._last >= TICK_SECONDS:
            self._report(done)

    def finish(self, done: int) -> None:
        if self.on_progress is not None:
            self.total = done if self.total is None else self.total
            self._report(done)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one record.

    ``index``: the record's position in the file (0-based; JSON Lines: blank lines not counted).
    ``field``: where in the record, in the format's own terms (``conversations[2].from``,
    ``history[0][1]``). ``kind``, a stable name: ``not_json``, ``not_object``, ``missing_id``,
    ``duplicate_id``, ``missing_conversations``, ``empty_conversations``, ``unknown_role``,
    ``first_turn_not_human``, ``roles_not_alternating``, ``empty_value``, ``not_text``, ``bad_history``,
    ``no_answer``, ``image_in_answer``, ``image_in_system``, ``image_count``, ``image_missing``,
    ``image_embedded``, ``image_unreadable``, ``image_too_large``, ``too_long``, ``encode_failed``,
    ``not_applicable``, ``duplicate_key``, ``unsupported_column``. ``message``: one line a user can
    act on, cut to :data:`MAX_MESSAGE_CHARS`."""

    index: int
    record_id: Optional[str]
    field: str
    kind: str
    message: str

    def __post_init__(self):
        if len(self.message) > MAX_MESSAGE_CHARS:
            object.__setattr__(self, "message", self.message[:MAX_MESSAGE_CHARS - 3] + "...")

    def __str__(self) -> str:
        shown = self.record_id if self.record_id is None or len(self.record_id) <= MAX_ID_CHARS else \
            self.record_id[:MAX_ID_CHARS] + "..."
        who = f"record {self.index}" + (f" (id {shown!r})" if shown is not None else "")
        return f"{who}, {self.field}: {self.message}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Record:
    """A record that passed validation, whatever its format: ``record_id`` ``#<index>`` when it
    has none; ``turns`` ``(role, text)``, ``user`` / ``assistant`` alternating, user first;
    ``images`` absolute paths, one per ``<image>`` in the user turns. The ``*_field`` names say
    where the turns, system prompt and images are, in the format's terms (``messages[0].content``).
    """

    index: int
    record_id: str
    turns: list[tuple[str, str]]
    images: list[str] = field(default_factory=list)
    system: Optional[str] = None
    text_field: str = "conversations"
    system_field: str = "system"
    image_field: str = "image"


@dataclass
class DatasetReport:

    path: str
    records: list[Record]
    problems: list[Problem]
    total: int
    layout: Optional[DatasetLayout] = None

    @property
    def bad_indices(self) -> set[int]:
        return {p.index for p in self.problems}

    def summary(self) -> str:
        bad = len(self.bad_indices)
        return (f"{self.total} records in {self.path}: {self.total - bad} good, {bad} with "
                f"problems ({len(self.problems)} problems)")

    def to_dict(self) -> dict:
        return {"path": self.path, "total": self.total, "good": len(self.records),
                "layout": self.layout.to_dict() if self.layout else None,
                "problems": [p.to_dict() for p in self.problems]}


class DatasetError(ValueError):
    """The dataset has problems and ``skip_bad_records`` is off: the first ``limit`` are in the
    message, every one in ``report.problems`` (nothing is written)."""

    def __init__(self, report: DatasetReport, limit: int = 50):
        self.report = report
        #: One line per problem (the command line prints them under the message).
        self.details = [f"- {p}" for p in report.problems[:limit]]
        if any(p.kind in ("duplicate_id", "missing_id") for p in report.problems):
            self.details.append(f"({NO_IDS})")
        more = len(report.problems) - limit
        if more > 0:
            self.details.append(f"... and {more} more (fix these first, or skip_bad_records=True: a run "
                                "that skips them lists every one in output_dir/dataset_problems.jsonl)")
        super().__init__(f"{report.summary()}; fix them or set skip_bad_records=True:\n"
                         + "\n".join(f"  {line}" for line in self.details))


def load_dataset(path: os.PathLike, image_root: Optional[os.PathLike] = None, check_images: bool = True,
                 options: DatasetOptions = DatasetOptions(), on_progress: Optional[OnProgress] = None
                 ) -> DatasetReport:
    """Read and validate a dataset: ``path`` is the data file, or (``options.entry`` set) a
    ``dataset_info.json`` or its folder; ``image_root`` defaults to that file's folder;
    ``check_images`` opens every image file once. Raises FileNotFoundError or IsADirectoryError
    (not a file) or ValueError (the file, the entry or the format cannot be used; one line)."""
    path = Path(path).expanduser()
    layout: Optional[DatasetLayout] = None
    if options.entry is not None:
        entry = read_entry(path, options.entry)
        data_file, layout, default_root = entry.data_file, entry.layout, entry.info_path.parent
    else:
        if path.is_dir():
            raise IsADirectoryError(f"dataset_path={str(path)!r} is a folder: give the data file itself "
                                    f"(JSON, JSON Lines or parquet), or name a dataset_info.json entry with dataset")
        try:
            check_regular(path)
        except NotARegularFile as exc:  # a FIFO would block the reading, a device never end it
            raise ValueError(f"dataset_path={str(path)!r}: {exc.reason}") from None
        except UnreadableFile as exc:
            raise FileNotFoundError(f"dataset_path={str(path)!r}: {exc.reason}") from None
        except ValueError:  # a NUL byte in the path
            raise FileNotFoundError(f"dataset_path={str(path)!r}: not a usable path (a NUL byte)") from None
        data_file, default_root = path, path.parent
    root = Path(image_root).expanduser() if image_root else default_root
    records: list[Record] = []
    problems: list[Problem] = []
    seen_ids: dict[str, int] = {}
    without_id: list[int] = []  # records with no id: a problem only where other records have one
    image_check = functools.cache(image_problem) if check_images else None  # each file once per reading
    ticker = ProgressTicker(on_progress, "reading dataset", str(data_file))

    def read(index: int, value: dict) -> None:
        found, record = validate_record(index, value, layout, root, image_check)
        has_id, record_id = record_id_of(value, layout)
        if not has_id and layout.columns.get("id"):
            without_id.append(index)
        elif record_id is not None and record_id in seen_ids:
            found.append(Problem(index, record_id, layout.columns["id"], "duplicate_id",
                                 f"id {record_id!r} is already used by record {seen_ids[record_id]}"))
        elif record_id is not None:
            seen_ids[record_id] = index
        problems.extend(found)
        if not found:
            records.append(record)

    # auto: records whose keys do not tell the format wait (at most DETECT_LIMIT) for one
    # that does, and are then read in its layout: one malformed first record is that
    # record's problem, not the whole file's.
    undetected: list[tuple[int, dict]] = []
    first_failure: Optional[UndetectedFormat] = None
    fallback: Optional[DatasetLayout] = None  # what a turns column suggests when no record shows its role tags
    total = 0
    for index, (value, unreadable) in enumerate(iter_raw(data_file)):
        total += 1
        ticker.tick(total)
        if unreadable is not None:
            problems.append(Problem(index, None, unreadable[0], "not_json", unreadable[1]))
            continue
        if not isinstance(value, dict):
            problems.append(Problem(index, None, "(record)", "not_object",
                                    f"expected a JSON object, got {type(value).__name__}"))
            continue
        if layout is None:
            try:
                layout = resolve_layout(options, (index, value))
            except UndetectedFormat as exc:
                first_failure, fallback = first_failure or exc, fallback or exc.fallback
                undetected.append((index, value))
                if len(undetected) < DETECT_LIMIT:
                    continue
                if fallback is None:
                    raise ValueError(f"dataset {data_file}: {first_failure} (nor does any of the first "
                                     f"{DETECT_LIMIT} records)") from None
                layout, (index, value) = fallback, undetected.pop()  # read below, after the waiting ones
            for waiting in undetected:
                read(*waiting)
            undetected = []
        read(index, value)
    if undetected and fallback is not None:  # no record shows its role tags: each is named as its own problem
        layout = fallback
        for waiting in undetected:
            read(*waiting)
        undetected = []
    if undetected:
        others = f" (nor does any of the other {len(undetected) - 1} records)" if len(undetected) > 1 else ""
        raise ValueError(f"dataset {data_file}: {first_failure}{others}")
    if layout is None:  # no record is an object: still say what the file would be read as
        layout = resolve_layout(options, None) if options.format != "auto" else None
    # An id column named on purpose (dataset_columns, or an entry's columns: entries read
    # none by default) that no record has is a mistake, not a file without ids.
    named_by = ("dataset_columns" if "id" in options.columns else
                "the entry's columns" if options.entry is not None else None)
    if layout is not None and without_id and (seen_ids or named_by):
        column = layout.columns["id"]
        why = ("missing or empty id (other records of the file have one: every record needs one)"
               if seen_ids else f"no record has the id column {column!r} that {named_by} names")
        problems += [Problem(i, None, column, "missing_id", why) for i in without_id]
        unnamed = set(without_id)
        records = [r for r in records if r.index not in unnamed]
    problems.sort(key=lambda p: p.index)
    ticker.finish(total)
    return DatasetReport(str(data_file), records, problems, total, layout)


ImageCheck = Callable[[Path], Optional[ImageProblem]]


def validate_record(index: int, value: dict, layout: DatasetLayout, image_root: Path,
                    image_check: Optional[ImageCheck]) -> tuple[list[Problem], Record]:
    """Every problem of one record, and the record as read (``image_check``: None, the image
    files are not opened)."""
    problems: list[Problem] = []
    has_id, record_id = record_id_of(value, layout)

    def problem(where: str, kind: str, message: str) -> None:
        problems.append(Problem(index, record_id, where, kind, message))

    for where in duplicate_key_paths(value):
        problem(where, "duplicate_key", "this key appears more than once in its object (JSON keeps only the last "
                                        "value, silently); keep one")
    if has_id and record_id is None:
        problem(layout.columns["id"], "missing_id", "missing or empty id")
    unsupported_columns(value, layout, problem)
    content = convert(value, layout, problem)
    raw_images, column = image_column(value, layout, problem)
    images = _check_images(raw_images, column, image_root, problem, image_check)
    placeholders = sum(text.count(IMAGE_PLACEHOLDER) for role, text in content.turns if role == "user")
    if images is not None and placeholders != len(images):
        problem(column, "image_count", f"{placeholders} {IMAGE_PLACEHOLDER} {plural('placeholder', placeholders)} "
                                       f"in the user turns but {counted(len(images), 'image')}")
    return problems, Record(index, record_id or f"#{index}", content.turns, images or [], content.system,
                            content.text_field, content.system_field, column)


def _check_images(raw: Any, column: str, image_root: Path, problem,
                  image_check: Optional[ImageCheck]) -> Optional[list[str]]:
    """The record's image paths made absolute, or None when one of them is a problem."""
    if raw is None:
        return []
    entries = raw if isinstance(raw, list) else [raw]
    images = []
    for i, entry in enumerate(entries):
        where = column if not isinstance(raw, list) else f"{column}[{i}]"
        if isinstance(entry, dict) and "bytes" in entry:  # Hugging Face datasets' Image in parquet
            problem(where, "image_embedded", "the image's bytes are stored in the dataset (as Hugging Face "
                                             "datasets writes them to parquet): hyport reads images from files; "
                                             "save them as files and list their paths")
            continue
        if not isinstance(entry, str) or not entry.strip():
            problem(where, "image_missing", f"expected a file path, got {entry!r:.80}")
            continue
        path = (image_root / entry).expanduser()
        try:
            found, exists = path.is_file(), path.exists()
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte: not a file either
            # (the exception's own text repeats the whole path, whatever its length)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:80]
            problem(where, "image_missing", f"{entry!r:.80}: not a usable path ({why})")
            continue
        if not found:
            what = ("a folder, not an image file" if path.is_dir() else
                    "not a regular file (a pipe, device or socket)" if exists else
                    f"no such file under {image_root}")
            problem(where, "image_missing", f"{entry!r:.200}: {what}")
            continue
        verdict = image_check(path) if image_check is not None else None
        if verdict is not None:
            kind, reason = verdict
            said = "too large to decode" if kind == "image_too_large" else "not a readable image"
            problem(where, kind, f"{entry!r:.200} ({path}): {said} ({reason})")
            continue
        images.append(str(path))
    return images if len(images) == len(entries) else None
