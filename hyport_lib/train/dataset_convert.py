"""One record (a JSON object) of a file read in its :class:`~hyport_lib.train.dataset_formats.DatasetLayout`
into its system prompt and ``(role, text)`` turns (:func:`convert`), each problem named in the
format's own terms (``history[1][0]``, ``messages[2].role``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from hyport_lib.train.dataset_formats import IMAGE_PLACEHOLDER, UNSUPPORTED_COLUMNS, DatasetLayout

#: ``problem(field, kind, message)``: report one thing wrong with the current record.
ProblemSink = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Converted:
    """A record's content as read, and where its turns and system prompt are."""

    turns: list
    system: Optional[str]
    text_field: str
    system_field: str


def record_id_of(value: dict, layout: DatasetLayout) -> tuple[bool, Optional[str]]:
    """``(has an id column value, the id as text or None when blank)``."""
    column = layout.columns.get("id")
    if not column or value.get(column) is None:
        return False, None
    raw = value[column]
    return True, (None if str(raw).strip() == "" else str(raw))


def unsupported_columns(value: dict, layout: DatasetLayout, problem: ProblemSink) -> None:
    """Name each column of ``layout.refused_columns`` the record holds with a value (read without
    a ``tools`` list, the record would train something other than what it says)."""
    for column in layout.refused_columns:
        held = value.get(column)
        if held is None or held == "" or held == [] or held == {}:
            continue
        problem(column, "unsupported_column",
                f"{UNSUPPORTED_COLUMNS[column]} are not supported, and leaving them out would change what the "
                f"model is trained on; remove the column, or set dataset_columns={{{column!r}: None}} to "
                "train without it")


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
    """A system prompt as read (None: none); an image placeholder in it is named (it would
    expand into image tokens with no image to fill them)."""
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


def _turn_text(text: Any, where: str, problem: ProblemSink) -> str:
    """A turn's text; missing or blank text and a value that is not text (``42`` is not an empty
    turn) are different problems, read as ""."""
    if isinstance(text, str) and text.strip():
        return text
    if text is None or isinstance(text, str):
        problem(where, "empty_value", "empty or missing text")
    elif isinstance(text, list):
        problem(where, "not_text", "a list of content parts: hyport reads text content "
                                   f"(images as {IMAGE_PLACEHOLDER} placeholders with an images column)")
    else:
        problem(where, "not_text", f"expected text, got {type(text).__name__}")
    return ""


def _system_turn_text(text: Any, where: str, problem: ProblemSink) -> Optional[str]:
    """A system turn's text: blank or missing is no system prompt (as LLaMA-Factory's templates
    read it); a value that is not text is named."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    return _turn_text(text, where, problem) or None


#: The turns column of each message format, and the format it suggests (for a hint).
_TURN_COLUMNS = {"conversations": "sharegpt", "messages": "openai"}


def _other_turns_hint(value: dict, column: str) -> str:
    """`` (the record has 'messages': the openai format?)`` when the other format's turns are there."""
    others = [name for name in _TURN_COLUMNS if name != column and isinstance(value.get(name), list)]
    if not others:
        return ""
    return f" (the record has {others[0]!r}: the {_TURN_COLUMNS[others[0]]} format?)"


def alpaca_turns(value: dict, layout: DatasetLayout, problem: ProblemSink) -> Converted:
    """An alpaca record's content; every problem named in its columns."""
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
            text = _turn_text(text, f"{where}[{j}]", problem)
            if role == "assistant" and IMAGE_PLACEHOLDER in text:
                problem(f"{where}[{j}]", "image_in_answer", f"{IMAGE_PLACEHOLDER} in a response: images "
                                                            "belong to the queries")
            turns.append((role, text))
    prompt_columns = [c[k] for k in ("prompt", "query") if c.get(k)]
    parts = [t for t in (_text(value, column, problem) for column in prompt_columns) if t]
    not_text = any(value.get(column) is not None and not isinstance(value[column], str)
                   for column in prompt_columns)  # already named as not text
    if not parts and not not_text:
        also = f" (and {prompt_columns[1]} is empty too)" if len(prompt_columns) > 1 else ""
        problem(prompt_columns[0], "empty_value", f"empty or missing{also}: the prompt would be blank")
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
    system_column = c.get("system") or "system"
    system = _system_text(_text(value, c.get("system"), problem), system_column, problem)
    read = [column for column in ([history_column] if history else []) + prompt_columns + [response_column]
            if value.get(column) not in (None, "")] or prompt_columns + [response_column]
    return Converted(turns, system, "/".join(read), system_column)


def message_turns(value: dict, layout: DatasetLayout, problem: ProblemSink) -> Converted:
    """A sharegpt / openai record's content; every problem named in its column and tags."""
    column, t = layout.columns["messages"], layout.tags
    role_tag, content_tag = t["role_tag"], t["content_tag"]
    user, assistant, system_tag = t["user_tag"], t["assistant_tag"], t.get("system_tag")
    system_column = layout.columns.get("system")
    conversations = value.get(column)
    if conversations is None:
        problem(column, "missing_conversations", "missing" + _other_turns_hint(value, column))
        return Converted([], None, column, system_column or "system")
    if not isinstance(conversations, list) or not conversations:
        problem(column, "empty_conversations", "must be a non-empty list of turns")
        return Converted([], None, column, system_column or "system")
    start, system = 0, None
    first = conversations[0]
    if system_tag and isinstance(first, dict) and first.get(role_tag) == system_tag:
        start, system_field = 1, f"{column}[0].{content_tag}"
        system = _system_text(_system_turn_text(first.get(content_tag), system_field, problem),
                              system_field, problem)
        if len(conversations) == 1:
            problem(column, "empty_conversations", "holds only the system turn")
    else:
        system_field = system_column or "system"
        system = _system_text(_text(value, system_column, problem), system_field, problem)
    turns: list[tuple[str, str]] = []
    expected, previous = user, None
    for i in range(start, len(conversations)):
        turn, where = conversations[i], f"{column}[{i}]"
        if not isinstance(turn, dict):
            problem(where, "unknown_role", f"expected {{{role_tag!r}: ..., {content_tag!r}: ...}}, "
                                           f"got {turn!r:.60}")
            previous = None
            continue
        role, text = turn.get(role_tag), turn.get(content_tag)
        if not isinstance(role, str) or role not in (user, assistant):
            problem(f"{where}.{role_tag}", "unknown_role", _role_message(role, t))
        elif i == start and role != user:
            problem(f"{where}.{role_tag}", "first_turn_not_human", f"the first turn is {role!r}; it must be {user!r}")
        elif role != expected and previous in (user, assistant):  # (after an unknown role: that turn is named)
            problem(f"{where}.{role_tag}", "roles_not_alternating",
                    f"{role!r} follows {previous!r}; {user} and {assistant} turns must alternate")
        previous = role
        if turn.get("tool_calls"):
            # OpenAI's assistant turn that calls a tool: its content is usually null.
            problem(f"{where}.tool_calls", "not_text", "tool calls are not supported (hyport's smoke training "
                                                       "learns text answers)")
            text = ""
        else:
            text = _turn_text(text, f"{where}.{content_tag}", problem)
        if role == assistant and IMAGE_PLACEHOLDER in text:
            problem(f"{where}.{content_tag}", "image_in_answer",
                    f"{IMAGE_PLACEHOLDER} in a {assistant!r} turn: images belong to the {user!r} turns")
        if isinstance(role, str) and role in (user, assistant):
            turns.append(("user" if role == user else "assistant", text))
            expected = assistant if role == user else user
    # (a last turn of an unknown role is that problem already, not a missing answer)
    if turns and turns[-1][0] != "assistant" and previous == user:
        problem(f"{column}[{len(conversations) - 1}]", "no_answer",
                f"the last turn is {user!r}: there is no answer to learn")
    return Converted(turns, system, column, system_field)


def _role_message(role: Any, tags: Mapping) -> str:
    roles = f"user tags: {tags['user_tag']}; assistant tags: {tags['assistant_tag']}"
    if role is None:
        return f"missing (the role is read from {tags['role_tag']!r}; {roles})"
    if role == tags.get("system_tag"):
        return f"{role!r}: a system turn is read only as the first turn"
    if role in (tags.get("observation_tag"), tags.get("function_tag")):
        return f"{role!r}: tool turns (observation / function call) are not trained by hyport"
    if role == "system" and not tags.get("system_tag"):
        return (f"'system' is not a role tag ({roles}; no system_tag is named, so a system turn is not read: "
                "LLaMA-Factory skips such a record)")
    return f"{role!r:.60} is not a role tag ({roles})"


def convert(value: dict, layout: DatasetLayout, problem: ProblemSink) -> Converted:
    if layout.format == "alpaca":
        return alpaca_turns(value, layout, problem)
    return message_turns(value, layout, problem)
