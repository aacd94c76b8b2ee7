"""The record formats stage 04 reads, as LLaMA-Factory defines them, and their detection.

Three formats, each turned into hyport's :class:`~hyport_lib.train.dataset.Record`
(a system prompt, ``(role, text)`` turns with role ``user`` / ``assistant``, images):

* **alpaca**: ``instruction`` and ``input`` (joined by a newline) are the prompt,
  ``output`` the answer; optional ``system`` and ``history`` (a list of
  ``[query, response]`` pairs, earlier turns whose answers are learned too).
* **sharegpt**: a list of turns (column ``conversations``), each ``{"from": tag,
  "value": text}`` with tags ``human`` / ``gpt`` (any other names through the tags:
  ``user`` / ``assistant`` are common); a system prompt as a first turn tagged
  ``system`` or in a ``system`` column. The seed's ``test_data_packing.json`` is sharegpt
  with its images in ``image`` and an ``id`` per record.
* **openai**: a ``messages`` list of ``{"role": ..., "content": ...}`` with roles
  ``system`` / ``user`` / ``assistant`` (sharegpt with other default names).

Images are paths in a column (``images``, LLaMA-Factory's name, or ``image``, the seed's,
unless a column is named), one per ``<image>`` placeholder in the user turns.

:class:`DatasetOptions` is what the user asked for (``dataset_format``,
``dataset_columns``, ``dataset_tags``); :func:`resolve_layout` makes the
:class:`DatasetLayout` every record is read with, detecting an ``auto`` format from the
first record and saying what it chose. Problems are reported through a
``problem(field, kind, message)`` callback, with the field in the format's own terms
(``output``, ``history[1][0]``, ``messages[2].role``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

IMAGE_PLACEHOLDER = "<image>"
FORMATS = ("alpaca", "sharegpt", "openai")
FORMAT_CHOICES = ("auto",) + FORMATS
ALPACA_COLUMNS = ("prompt", "query", "response", "history", "system", "images")
#: ``id`` is hyport's own addition (LLaMA-Factory has none): it names records in problems.
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
#: The images column when none is named: LLaMA-Factory's ``images`` or the seed's ``image``.
DEFAULT_IMAGE_COLUMNS = ("images", "image")

#: Column and tag names of each format when read directly (``dataset_format``).
DIRECT_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "history": "history",
               "system": "system", "images": DEFAULT_IMAGE_COLUMNS},
    "sharegpt": {"messages": "conversations", "system": "system", "images": DEFAULT_IMAGE_COLUMNS, "id": "id"},
    "openai": {"messages": "messages", "system": "system", "images": DEFAULT_IMAGE_COLUMNS, "id": "id"},
}
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "system_tag": "system", "observation_tag": "observation", "function_tag": "function_call"}
OPENAI_TAGS = {**SHAREGPT_TAGS, "role_tag": "role", "content_tag": "content", "user_tag": "user",
               "assistant_tag": "assistant", "observation_tag": "tool"}
DIRECT_TAGS = {"alpaca": {}, "sharegpt": SHAREGPT_TAGS, "openai": OPENAI_TAGS}

#: ``problem(field, kind, message)``: report one thing wrong with the current record.
ProblemSink = Callable[[str, str, str], None]


@dataclass(frozen=True)
class DatasetOptions:
    """How the user asked for the dataset to be read.

    Attributes:
        format: ``auto`` (detected from the first record) or one of :data:`FORMATS`.
        columns: column names overriding the format's (dataset_info.json's ``columns``).
        tags: role and content tags overriding the format's (dataset_info.json's ``tags``).
        entry: the entry of a ``dataset_info.json`` to read (then the path names that file,
            and the entry alone says format, columns and tags).
    """

    format: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    entry: Optional[str] = None


@dataclass(frozen=True)
class DatasetLayout:
    """How every record of one file is read.

    Attributes:
        format: ``alpaca``, ``sharegpt`` or ``openai``.
        columns: role -> column name; None: not read; a tuple: the first of these
            present in a record (the default images column).
        tags: role and content tags of a turn (sharegpt, openai).
        chosen_by: one line saying where the layout came from (detected, given, an entry).
    """

    format: str
    columns: dict
    tags: dict
    chosen_by: str

    def to_dict(self) -> dict:
        columns = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.columns.items()}
        return {"format": self.format, "columns": columns, "tags": dict(self.tags), "chosen_by": self.chosen_by}

    def note(self) -> str:
        """Where the layout came from and what it is, e.g. ``dataset_format='alpaca':
        alpaca (instruction/input/output)``."""
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
    """What is wrong with ``dataset_format`` / ``dataset_columns`` / ``dataset_tags`` /
    ``dataset`` as a combination (one line each, naming the parameter)."""
    problems = []
    if entry is not None and (format != "auto" or columns or tags):
        given = [name for name, value in (("dataset_format", format != "auto"), ("dataset_columns", columns),
                                          ("dataset_tags", tags)) if value]
        problems.append(f"{', '.join(given)}: with dataset={entry!r} the dataset_info.json entry says how its "
                        f"file is read (its formatting, columns and tags); leave {', '.join(given)} unset")
    known = set(ALPACA_COLUMNS) | set(MESSAGE_COLUMNS)
    for key, value in columns.items():
        if key in UNSUPPORTED_COLUMNS:
            problems.append(f"dataset_columns[{key!r}]: {UNSUPPORTED_COLUMNS[key]} are not supported")
        elif key not in known:
            problems.append(f"dataset_columns[{key!r}]: not a column role (alpaca: {', '.join(ALPACA_COLUMNS)}; "
                            f"sharegpt / openai: {', '.join(MESSAGE_COLUMNS)})")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"dataset_columns[{key!r}]={value!r}: expected a column name")
    for key, value in tags.items():
        if key not in TAG_NAMES:
            problems.append(f"dataset_tags[{key!r}]: not a tag ({', '.join(TAG_NAMES)})")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"dataset_tags[{key!r}]={value!r}: expected a tag (text)")
    if format != "auto":
        problems.extend(_fit_problems(format, columns, tags, "dataset_columns", "dataset_tags"))
    return problems


def _fit_problems(format: str, columns: Mapping, tags: Mapping, columns_name: str, tags_name: str) -> list[str]:
    """Columns and tags that do not belong to ``format``."""
    allowed = ALPACA_COLUMNS if format == "alpaca" else MESSAGE_COLUMNS
    problems = [f"{columns_name}[{key!r}]: not a column of the {format} format ({', '.join(allowed)})"
                for key in columns if key not in allowed and key not in UNSUPPORTED_COLUMNS
                and key in set(ALPACA_COLUMNS) | set(MESSAGE_COLUMNS)]
    if format == "alpaca" and tags:
        problems.append(f"{tags_name}: role tags apply to the sharegpt and openai formats, not alpaca")
    return problems


def layout_for(format: str, columns: Mapping, tags: Mapping, chosen_by: str) -> DatasetLayout:
    """The direct layout of ``format`` with ``columns`` / ``tags`` overriding its names."""
    merged_columns = {**DIRECT_COLUMNS[format], **columns}
    return DatasetLayout(format, merged_columns, {**DIRECT_TAGS[format], **tags}, chosen_by)


def resolve_layout(options: DatasetOptions, first: Optional[tuple[int, Any]]) -> DatasetLayout:
    """The layout for ``options``; ``auto`` looks at ``first`` (``(index, value)`` of the
    first record that is a JSON object, or None).

    Raises:
        ValueError: ``auto`` cannot tell the format, or the columns / tags given do not fit
            the format detected.
    """
    if options.format != "auto":
        layout = layout_for(options.format, options.columns, options.tags, f"dataset_format={options.format!r}")
        return _images_named_as_in(layout, first)
    if first is None:
        raise ValueError("dataset_format='auto': no record is a JSON object to detect the format from; "
                         "set dataset_format")
    index, record = first
    format, columns, tags, seen = _detect(record, options.columns, options.tags, index)
    misfit = _fit_problems(format, options.columns, options.tags, "dataset_columns", "dataset_tags")
    if misfit:
        raise ValueError(f"dataset_format='auto' detected {format} from record {index}, but " + "; ".join(misfit))
    layout = layout_for(format, {**columns, **options.columns}, {**tags, **options.tags}, "")
    return _images_named_as_in(DatasetLayout(layout.format, layout.columns, layout.tags,
                                             f"detected from record {index} ({seen})"), first)


def _images_named_as_in(layout: DatasetLayout, first: Optional[tuple[int, Any]]) -> DatasetLayout:
    """The default images column, named as the first record names it (``image`` in the
    seed's files): what a problem calls the column of a record that has none."""
    if layout.columns.get("images") != DEFAULT_IMAGE_COLUMNS or first is None:
        return layout
    record = first[1]
    if "image" in record and "images" not in record:
        return DatasetLayout(layout.format, {**layout.columns, "images": ("image", "images")}, layout.tags,
                             layout.chosen_by)
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
        key = message_keys[0]
        turns = [t for t in record.get(key) or [] if isinstance(t, dict)]
        role_tag = tags.get("role_tag")
        if role_tag is None and turns:
            pairs = [(r, c) for r, c in (("from", "value"), ("role", "content")) if r in turns[0]]
            if not pairs:
                raise ValueError(f"dataset_format='auto': record {index}, {key}[0] has keys "
                                 f"{', '.join(map(repr, list(turns[0])[:6]))}: neither from/value (sharegpt) "
                                 "nor role/content (openai); set dataset_tags role_tag and content_tag")
            role_tag = pairs[0][0]
        openai = role_tag == "role" or (role_tag is None and key == "messages")
        format = "openai" if openai else "sharegpt"
        defaults = DIRECT_TAGS[format]
        role_tag = role_tag or defaults["role_tag"]
        roles = {t.get(role_tag) for t in turns if isinstance(t.get(role_tag), str)}
        found = {"messages": key}
        chosen = {"role_tag": role_tag}
        if "content_tag" not in tags and role_tag in ("from", "role"):
            chosen["content_tag"] = {"from": "value", "role": "content"}[role_tag]
        for tag, names in (("user_tag", ("human", "user")), ("assistant_tag", ("gpt", "assistant"))):
            present = [n for n in names if n in roles]
            if len(present) == 1:
                chosen[tag] = present[0]
        return format, found, chosen, f"{key!r} holds turns with {role_tag!r} tags"
    if any(k in record for k in ("instruction", "input", "output")):
        return "alpaca", {}, {}, "instruction / input / output"
    raise ValueError(f"dataset_format='auto': record {index} has keys {', '.join(map(repr, keys[:8]))}: not "
                     "alpaca (instruction / input / output), sharegpt (conversations of from / value turns) "
                     "or openai (messages of role / content turns); set dataset_format and dataset_columns")


def record_id_of(value: dict, layout: DatasetLayout) -> tuple[bool, Optional[str]]:
    """``(has an id column value, the id as text or None when blank)``."""
    column = layout.columns.get("id")
    if not column or value.get(column) is None:
        return False, None
    raw = value[column]
    return True, (None if str(raw).strip() == "" else str(raw))


def image_column(value: dict, layout: DatasetLayout, problem: ProblemSink) -> tuple[Any, str]:
    """``(the record's image paths as given or None, the column's name)``."""
    column = layout.columns.get("images")
    if column is None:
        return None, "images"
    names = column if isinstance(column, tuple) else (column,)
    present = [n for n in names if value.get(n) is not None]
    if len(present) > 1:
        problem(present[1], "image_count", f"both {present[0]!r} and {present[1]!r} hold images; give one")
    name = present[0] if present else names[0]
    return (value.get(present[0]) if present else None), name


def _system_text(text: Any, where: str, problem: ProblemSink) -> Optional[str]:
    """A system prompt as read (None: none); an image placeholder in it is named (the
    processor would expand it into image tokens with no image to fill them)."""
    if isinstance(text, str) and IMAGE_PLACEHOLDER in text:
        problem(where, "image_in_system", f"{IMAGE_PLACEHOLDER} in the system prompt: images belong to the "
                                          "user turns")
    return text if isinstance(text, str) and text.strip() else None


def _text(value: dict, column: Optional[str], problem: ProblemSink) -> Optional[str]:
    """A text column's value: None when absent, null or blank; a non-text value is named."""
    if not column or value.get(column) is None:
        return None
    text = value[column]
    if not isinstance(text, str):
        problem(column, "not_text", f"expected text, got {type(text).__name__}")
        return None
    return text if text.strip() else None


def alpaca_turns(value: dict, layout: DatasetLayout, problem: ProblemSink) -> tuple[list, Optional[str]]:
    """``(turns, system)`` of an alpaca record; every problem named in its columns."""
    c = layout.columns
    turns: list[tuple[str, str]] = []
    history_column = c.get("history")
    history = value.get(history_column) if history_column else None
    if history is not None and not isinstance(history, list):
        problem(history_column, "bad_history", f"expected a list of [query, response] pairs, "
                                               f"got {type(history).__name__}")
    for i, pair in enumerate(history if isinstance(history, list) else []):
        where = f"{history_column}[{i}]"
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            problem(where, "bad_history", f"expected a [query, response] pair, got {pair!r:.60}")
            continue
        for j, (role, text) in enumerate(zip(("user", "assistant"), pair)):
            if not isinstance(text, str) or not text.strip():
                problem(f"{where}[{j}]", "empty_value", "empty or missing text")
                text = ""
            elif role == "assistant" and IMAGE_PLACEHOLDER in text:
                problem(f"{where}[{j}]", "image_in_answer", f"{IMAGE_PLACEHOLDER} in a response: images "
                                                            "belong to the queries")
            turns.append((role, text))
    parts = [t for t in (_text(value, c.get("prompt"), problem), _text(value, c.get("query"), problem)) if t]
    not_text = any(c.get(k) and value.get(c[k]) is not None and not isinstance(value[c[k]], str)
                   for k in ("prompt", "query"))  # already named as not text
    if not parts and not not_text:
        also = f" (and {c['query']} is empty too)" if c.get("query") else ""
        problem(c["prompt"], "empty_value", f"empty or missing{also}: the prompt would be blank")
    turns.append(("user", "\n".join(parts)))
    response_column = c["response"]
    answer = value.get(response_column)
    if answer is None:
        problem(response_column, "no_answer", "missing: there is no answer to learn")
        answer = ""
    elif not isinstance(answer, str):
        problem(response_column, "not_text", f"expected text, got {type(answer).__name__}")
        answer = ""
    elif not answer.strip():
        problem(response_column, "empty_value", "empty")
    elif IMAGE_PLACEHOLDER in answer:
        problem(response_column, "image_in_answer", f"{IMAGE_PLACEHOLDER} in the response: images belong "
                                                    "to the prompt")
    turns.append(("assistant", answer))
    return turns, _system_text(_text(value, c.get("system"), problem), c.get("system") or "system", problem)


def message_turns(value: dict, layout: DatasetLayout, problem: ProblemSink) -> tuple[list, Optional[str]]:
    """``(turns, system)`` of a sharegpt / openai record; every problem named in its
    column and tags (``conversations[2].from``, ``messages[1].content``)."""
    column, t = layout.columns["messages"], layout.tags
    role_tag, content_tag = t["role_tag"], t["content_tag"]
    user, assistant, system_tag = t["user_tag"], t["assistant_tag"], t.get("system_tag")
    conversations = value.get(column)
    if conversations is None:
        problem(column, "missing_conversations", "missing")
        return [], None
    if not isinstance(conversations, list) or not conversations:
        problem(column, "empty_conversations", "must be a non-empty list of turns")
        return [], None
    start, system = 0, None
    first = conversations[0]
    if system_tag and isinstance(first, dict) and first.get(role_tag) == system_tag:
        start = 1
        system = _system_text(first.get(content_tag), f"{column}[0].{content_tag}", problem)
        if system is None:
            problem(f"{column}[0].{content_tag}", "empty_value", "empty or missing text")
        if len(conversations) == 1:
            problem(column, "empty_conversations", "holds only the system turn")
    else:
        system_column = layout.columns.get("system")
        system = _system_text(_text(value, system_column, problem), system_column or "system", problem)
    turns: list[tuple[str, str]] = []
    expected, previous = user, None
    for i in range(start, len(conversations)):
        turn, where = conversations[i], f"{column}[{i}]"
        if not isinstance(turn, dict):
            problem(where, "unknown_role", f"expected {{{role_tag!r}: ..., {content_tag!r}: ...}}, got {turn!r:.60}")
            previous = None
            continue
        role, text = turn.get(role_tag), turn.get(content_tag)
        if not isinstance(role, str) or role not in (user, assistant):
            problem(f"{where}.{role_tag}", "unknown_role", _role_message(role, t))
        elif i == start and role != user:
            problem(f"{where}.{role_tag}", "first_turn_not_human", f"the first turn is {role!r}; it must be {user!r}")
        elif role != expected:
            problem(f"{where}.{role_tag}", "roles_not_alternating",
                    f"{role!r} follows {previous!r}; {user} and {assistant} turns must alternate")
        previous = role
        if isinstance(text, list):
            problem(f"{where}.{content_tag}", "not_text", "a list of content parts: hyport reads text content "
                    f"(images as {IMAGE_PLACEHOLDER} placeholders with an images column)")
            text = ""
        elif not isinstance(text, str) or not text.strip():
            problem(f"{where}.{content_tag}", "empty_value", "empty or missing text")
            text = ""
        elif role == assistant and IMAGE_PLACEHOLDER in text:
            problem(f"{where}.{content_tag}", "image_in_answer",
                    f"{IMAGE_PLACEHOLDER} in a {assistant!r} turn: images belong to the {user!r} turns")
        if isinstance(role, str) and role in (user, assistant):
            turns.append(("user" if role == user else "assistant", text))
            expected = assistant if role == user else user
    # (a last turn of an unknown role is that problem already, not a missing answer)
    if turns and turns[-1][0] != "assistant" and previous == user:
        problem(f"{column}[{len(conversations) - 1}]", "no_answer",
                f"the last turn is {user!r}: there is no answer to learn")
    return turns, system


def _role_message(role: Any, tags: Mapping) -> str:
    roles = f"user tags: {tags['user_tag']}; assistant tags: {tags['assistant_tag']}"
    if role is None:
        return f"missing (the role is read from {tags['role_tag']!r}; {roles})"
    if role == tags.get("system_tag"):
        return f"{role!r}: a system turn is read only as the first turn"
    if role in (tags.get("observation_tag"), tags.get("function_tag")):
        return f"{role!r}: tool turns (observation / function call) are not trained by hyport"
    return f"{role!r:.60} is not a role tag ({roles})"


def convert(value: dict, layout: DatasetLayout, problem: ProblemSink) -> tuple[list, Optional[str]]:
    """``(turns, system)`` of one record in ``layout``'s format."""
    if layout.format == "alpaca":
        return alpaca_turns(value, layout, problem)
    return message_turns(value, layout, problem)
