"""The record formats stage 04 reads (alpaca, sharegpt, openai, as LLaMA-Factory defines them;
docs/datasets.md): what the user asked for (:class:`DatasetOptions`) made into the layout every
record is read with (:func:`resolve_layout`), ``auto`` detected from the first record that tells it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

IMAGE_PLACEHOLDER = "<image>"
FORMATS = ("alpaca", "sharegpt", "openai")
FORMAT_CHOICES = ("auto",) + FORMATS
#: ``id`` is hyport's own addition (LLaMA-Factory has none): it names records in problems.
ALPACA_COLUMNS = ("prompt", "query", "response", "history", "system", "images", "id")
MESSAGE_COLUMNS = ("messages", "system", "images", "id")
TAG_NAMES = ("role_tag", "content_tag", "user_tag", "assistant_tag", "system_tag",
             "observation_tag", "function_tag")
#: LLaMA-Factory columns hyport does not train on, and why (named in the error).
UNSUPPORTED_COLUMNS = {
    "tools": "tool descriptions (hyport's smoke training has no tool calls)",
    "chosen": "preference pairs (ranking data; hyport trains supervised answers)",
    "rejected": "preference pairs (ranking data; hyport trains supervised answers)",
    "kto_tag": "KTO feedback labels (hyport trains supervised answers)",
    "videos": "videos (hyport trains on text and images)",
    "audios": "audio (hyport trains on text and images)",
}
#: Columns that cannot be None in ``dataset_columns`` (None: a column not read, as in
#: dataset_info.json), and what they hold.
NEEDED_COLUMNS = {"response": "it holds the answer", "messages": "it holds the turns"}
#: The images column when none is named: LLaMA-Factory's ``images`` or the seed's ``image``.
DEFAULT_IMAGE_COLUMNS = ("images", "image")

#: Column and tag names of each format when read directly (``dataset_format``).
DIRECT_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "history": "history",
               "system": "system", "images": DEFAULT_IMAGE_COLUMNS, "id": "id"},
    "sharegpt": {"messages": "conversations", "system": "system", "images": DEFAULT_IMAGE_COLUMNS, "id": "id"},
    "openai": {"messages": "messages", "system": "system", "images": DEFAULT_IMAGE_COLUMNS, "id": "id"},
}
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "system_tag": "system", "observation_tag": "observation", "function_tag": "function_call"}
OPENAI_TAGS = {**SHAREGPT_TAGS, "role_tag": "role", "content_tag": "content", "user_tag": "user",
               "assistant_tag": "assistant", "observation_tag": "tool"}
DIRECT_TAGS = {"alpaca": {}, "sharegpt": SHAREGPT_TAGS, "openai": OPENAI_TAGS}

#: ``auto`` detection looks at no more than this many records that are JSON objects
#: before it gives up (the undetectable ones before a detectable one are read in its layout).
DETECT_LIMIT = 100


class UndetectedFormat(ValueError):
    """``auto`` cannot tell the format from one record: a later record may still tell it.

    ``guess``: ``(format, columns, tags, what was seen)`` when the turns column says sharegpt
    or openai but its turns do not show the role tags. ``fallback``: that guess's layout (set by
    :func:`resolve_layout`), read in when no record tells more, so that each record is named as
    its own problem.
    """

    def __init__(self, message: str, guess: Optional[tuple] = None):
        super().__init__(message)
        self.guess = guess
        self.fallback: Optional[DatasetLayout] = None


@dataclass(frozen=True)
class DatasetOptions:
    """How the user asked for the dataset to be read (Params' ``dataset_*``): an ``entry`` of a
    dataset_info.json alone then says format, columns and tags."""

    format: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    entry: Optional[str] = None


@dataclass(frozen=True)
class DatasetLayout:
    """How every record of one file is read.

    ``columns``: role -> column name (None: not read; a tuple: the first of these a record
    has). ``caveat``: where hyport reads the records differently from LLaMA-Factory (a plan
    note). ``refused_columns``: :data:`UNSUPPORTED_COLUMNS` a record may not hold with a value:
    a file read directly refuses all but those ``dataset_columns`` sets to None; a
    ``dataset_info.json`` entry none (it reads only the columns it names, as LLaMA-Factory does).
    """

    format: str
    columns: dict
    tags: dict
    chosen_by: str
    caveat: Optional[str] = None
    refused_columns: tuple = ()

    def to_dict(self) -> dict:
        columns = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.columns.items()}
        return {"format": self.format, "columns": columns, "tags": dict(self.tags), "chosen_by": self.chosen_by,
                "caveat": self.caveat}

    def note(self) -> str:
        """e.g. ``dataset_format='alpaca': alpaca (instruction/input/output)``."""
        return f"{self.chosen_by}: {self.describe()}"

    def describe(self) -> str:
        """``sharegpt (conversations; from/value; human/gpt)``, for notes and errors."""
        c, t = self.columns, self.tags
        if self.format == "alpaca":
            names = "/".join(str(c[k]) for k in ("prompt", "query", "response") if c.get(k))
            return f"alpaca ({names})"
        return (f"{self.format} ({c['messages']}; {t['role_tag']}/{t['content_tag']}; "
                f"{t['user_tag']}/{t['assistant_tag']})")


def option_problems(format: str, columns: Mapping, tags: Mapping, entry: Optional[str]) -> list[str]:
    """What is wrong with ``dataset_format`` / ``_columns`` / ``_tags`` / ``dataset`` together."""
    problems = []
    if entry is not None and (format != "auto" or columns or tags):
        given = [name for name, value in (("dataset_format", format != "auto"), ("dataset_columns", columns),
                                          ("dataset_tags", tags)) if value]
        problems.append(f"{', '.join(given)}: with dataset={entry!r} the dataset_info.json entry says how its "
                        f"file is read (its formatting, columns and tags); leave {', '.join(given)} unset")
    if entry is not None and "," in entry:
        problems.append(multiple_entries_message(entry))
    known = set(ALPACA_COLUMNS) | set(MESSAGE_COLUMNS)
    for key, value in columns.items():
        if key in UNSUPPORTED_COLUMNS:
            if value is not None:  # None: not read (as in LLaMA-Factory), so nothing unsupported is used
                problems.append(f"dataset_columns[{key!r}]: {UNSUPPORTED_COLUMNS[key]} are not supported; "
                                "leave it out or set it to None (not read)")
        elif key not in known:
            problems.append(f"dataset_columns[{key!r}]: not a column role (alpaca: {', '.join(ALPACA_COLUMNS)}; "
                            f"sharegpt / openai: {', '.join(MESSAGE_COLUMNS)})")
        elif value is None and key in NEEDED_COLUMNS:
            problems.append(f"dataset_columns[{key!r}]=None: {NEEDED_COLUMNS[key]}; it cannot be left unread")
        elif value is not None and (not isinstance(value, str) or not value.strip()):
            problems.append(f"dataset_columns[{key!r}]={value!r}: expected a column name (or None: not read)")
    if "prompt" in columns and "query" in columns and columns["prompt"] is None and columns["query"] is None:
        problems.append("dataset_columns['prompt'] and ['query'] are both None: one of them must hold the prompt")
    for key, value in tags.items():
        if key not in TAG_NAMES:
            problems.append(f"dataset_tags[{key!r}]: not a tag ({', '.join(TAG_NAMES)})")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"dataset_tags[{key!r}]={value!r}: expected a tag (text)")
    if format != "auto":
        problems.extend(_fit_problems(format, columns, tags))
    return problems


def multiple_entries_message(entry: str) -> str:
    """``dataset='a,b'`` (LLaMA-Factory's way of mixing datasets), said with the fix."""
    names = [name.strip() for name in entry.split(",") if name.strip()]
    one_by_one = ", then ".join(f"dataset={name!r}" for name in names)
    return (f"dataset={entry!r}: hyport trains one dataset_info.json entry per run (LLaMA-Factory's "
            f"comma-separated list mixes several); name them one at a time ({one_by_one})")


def _fit_problems(format: str, columns: Mapping, tags: Mapping) -> list[str]:
    """Columns and tags that do not belong to ``format``."""
    allowed = ALPACA_COLUMNS if format == "alpaca" else MESSAGE_COLUMNS
    problems = [f"dataset_columns[{key!r}]: not a column of the {format} format ({', '.join(allowed)})"
                for key in columns if key not in allowed and key not in UNSUPPORTED_COLUMNS
                and key in set(ALPACA_COLUMNS) | set(MESSAGE_COLUMNS)]
    if format == "alpaca" and tags:
        problems.append("dataset_tags: role tags apply to the sharegpt and openai formats, not alpaca")
    return problems


def layout_for(format: str, columns: Mapping, tags: Mapping, chosen_by: str) -> DatasetLayout:
    """The direct layout of ``format`` with ``columns`` / ``tags`` overriding its names (an
    unsupported column is named only as None, :func:`option_problems`: not read, left out)."""
    refused = tuple(key for key in UNSUPPORTED_COLUMNS if key not in columns)
    columns = {key: value for key, value in columns.items() if key not in UNSUPPORTED_COLUMNS}
    merged_columns = {**DIRECT_COLUMNS[format], **columns}
    return DatasetLayout(format, merged_columns, {**DIRECT_TAGS[format], **tags}, chosen_by,
                         refused_columns=refused)


def resolve_layout(options: DatasetOptions, first: Optional[tuple[int, Any]]) -> DatasetLayout:
    """The layout for ``options``; ``auto`` looks at ``first`` (``(index, value)`` of a record
    that is a JSON object, or None). Raises :class:`UndetectedFormat` when this record does not
    tell the format, ValueError when nothing can (no record, an ambiguous one, names that do not fit)."""
    if options.format != "auto":
        layout = layout_for(options.format, options.columns, options.tags, f"dataset_format={options.format!r}")
        return _images_named_as_in(layout, first)
    if first is None:
        raise ValueError("dataset_format='auto': no record is a JSON object to detect the format from; "
                         "set dataset_format")
    index, record = first
    try:
        format, columns, tags, seen = _detect(record, options.columns, options.tags, index)
    except UndetectedFormat as exc:
        if exc.guess is not None:
            format, columns, tags, seen = exc.guess
            if not _fit_problems(format, options.columns, options.tags):
                exc.fallback = _detected_layout(format, columns, tags, options, first,
                                                f"guessed from record {index} ({seen}; no record shows both a "
                                                "user and an assistant tag)")
        raise
    misfit = _fit_problems(format, options.columns, options.tags)
    if misfit:
        raise ValueError(f"dataset_format='auto' detected {format} from record {index}, but " + "; ".join(misfit))
    return _detected_layout(format, columns, tags, options, first, f"detected from record {index} ({seen})")


def _detected_layout(format: str, columns: dict, tags: dict, options: DatasetOptions, first: tuple[int, Any],
                     chosen_by: str) -> DatasetLayout:
    layout = layout_for(format, {**columns, **options.columns}, {**tags, **options.tags}, chosen_by)
    return _images_named_as_in(layout, first)


def _images_named_as_in(layout: DatasetLayout, first: Optional[tuple[int, Any]]) -> DatasetLayout:
    """The default images column, named as the first record names it (``image`` in the
    seed's files): what a problem calls the column of a record that has none."""
    if layout.columns.get("images") != DEFAULT_IMAGE_COLUMNS or first is None:
        return layout
    record = first[1]
    if "image" in record and "images" not in record:
        return replace(layout, columns={**layout.columns, "images": ("image", "images")})
    return layout


def _detect(record: dict, columns: Mapping, tags: Mapping, index: int) -> tuple[str, dict, dict, str]:
    """``(format, columns, tags, what was seen)`` from one record's keys and turns."""
    keys = list(record)
    if "messages" in columns:
        message_keys = [columns["messages"]]
    elif any(k in columns for k in ("prompt", "query", "response", "history")):
        return "alpaca", {}, {}, "alpaca columns given"
    else:
        message_keys = [k for k in ("conversations", "messages") if isinstance(record.get(k), list)]
    if len(message_keys) > 1:
        raise ValueError(f"dataset_format='auto': record {index} has both 'conversations' and 'messages'; "
                         "name the one to train on with dataset_columns={'messages': ...}")
    if message_keys:
        return _detect_turns(record, message_keys[0], tags, index)
    if any(k in record for k in ("instruction", "input", "output")):
        return "alpaca", {}, {}, "instruction / input / output"
    raise UndetectedFormat(f"dataset_format='auto': record {index} has keys {_keys(keys, 8)}: not "
                           "alpaca (instruction / input / output), sharegpt (conversations of from / value "
                           "turns) or openai (messages of role / content turns); set dataset_format and "
                           "dataset_columns")


def _detect_turns(record: dict, key: str, tags: Mapping, index: int) -> tuple[str, dict, dict, str]:
    """sharegpt or openai, and the role tags, from the turns in ``record[key]``;
    :class:`UndetectedFormat` when they do not show the role key, a user and an assistant tag."""
    where = f"dataset_format='auto': record {index}, {key}"
    turns = [t for t in record.get(key) or [] if isinstance(t, dict)]
    if not turns:
        given_role = tags.get("role_tag")
        openai = given_role == "role" or (given_role is None and key == "messages")
        guess = ("openai" if openai else "sharegpt", {"messages": key}, {}, f"no turns in {key!r}")
        raise UndetectedFormat(f"{where}: no turns to tell the role tags from; set dataset_format and "
                               "dataset_tags", guess)
    role_tag = tags.get("role_tag")
    if role_tag is None:
        pairs = [(r, c) for r, c in (("from", "value"), ("role", "content")) if r in turns[0]]
        if not pairs:
            raise UndetectedFormat(f"{where}[0] has keys {_keys(turns[0], 6)}: neither from/value (sharegpt) "
                                   "nor role/content (openai); set dataset_tags role_tag and content_tag")
        role_tag = pairs[0][0]
    elif not any(role_tag in t for t in turns):
        raise UndetectedFormat(f"{where}: no turn has the role key {role_tag!r} that dataset_tags names")
    openai = role_tag == "role"
    format = "openai" if openai else "sharegpt"
    roles = list(dict.fromkeys(t.get(role_tag) for t in turns if isinstance(t.get(role_tag), str)))
    chosen = {"role_tag": role_tag}
    if "content_tag" not in tags and role_tag in ("from", "role"):
        chosen["content_tag"] = {"from": "value", "role": "content"}[role_tag]
    unclear = []
    for tag, names in (("user_tag", ("human", "user")), ("assistant_tag", ("gpt", "assistant"))):
        if tag in tags:
            continue
        present = [n for n in names if n in roles]
        if len(present) == 1:
            chosen[tag] = present[0]
        else:
            side = tag.split("_")[0]
            unclear.append(f"two {side} tags ({' and '.join(map(repr, present))})" if present else
                           f"no {side} tag ({' or '.join(map(repr, names))})")
    seen = f"{key!r} holds turns with {role_tag!r} tags"
    if unclear:
        shown = ", ".join(f"{r!r:.40}" for r in roles[:6]) or "none"
        raise UndetectedFormat(f"{where}: its {role_tag!r} tags ({shown}) show {' and '.join(unclear)}; "
                               "set dataset_tags user_tag and assistant_tag", (format, {"messages": key}, chosen, seen))
    return format, {"messages": key}, chosen, seen


def _keys(keys, most: int) -> str:
    """The first ``most`` keys, each cut to 40 characters (a key can be any length)."""
    return ", ".join(f"{key!r:.40}" for key in list(keys)[:most])
