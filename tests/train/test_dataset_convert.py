"""One record read in its format (hyport_lib/train/dataset_convert.py): every problem named in the
format's own terms, a value that is not text not called empty, an empty system turn no system
prompt, and the unsupported columns refused unless set to None."""

from __future__ import annotations

import json
import re

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_convert import convert, image_column, record_id_of
from hyport_lib.train.dataset_formats import DatasetOptions, layout_for
from hyport_lib.train.params import Params, SAMPLE_DATASETS as DATA

from .test_dataset_formats import ALPACA, EXPECTED, MESSAGES, SHAREGPT, _read, write_records
from .test_dataset_info import _info_copy


def test_a_malformed_record_is_named_in_each_formats_own_terms(tmp_path):
    alpaca = ALPACA + [{"instruction": "Say hi.", "output": ""},
                       {"instruction": "", "input": "", "output": "x"},
                       {"instruction": "q", "output": 7},
                       {"instruction": "q", "output": "a", "history": [["only one"]]},
                       {"instruction": "q"}]
    said = [str(p) for p in load_dataset(write_records(alpaca, tmp_path / "a.json")).problems]
    assert said == ["record 3, output: empty",
                    "record 4, instruction: empty or missing (and input is empty too): the prompt would be blank",
                    "record 5, output: expected text, got int",
                    "record 6, history[0]: expected a [query, response] pair, got ['only one']",
                    "record 7, output: missing: there is no answer to learn"]
    messages = MESSAGES + [{"id": "a6", "messages": [{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"},
                                                     {"role": "bot", "content": "b"}]},
                           {"id": "a7", "messages": [{"role": "user", "content": "q"},
                                                     {"role": "system", "content": "late"}]},
                           {"id": "a8", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                                                     {"role": "assistant", "content": "a"}]},
                           {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    problems = load_dataset(write_records(messages, tmp_path / "m.jsonl")).problems
    assert [str(p) for p in problems] == [
        "record 3 (id 'a6'), messages[2].role: 'bot' is not a role tag (user tags: user; assistant tags: assistant)",
        "record 4 (id 'a7'), messages[1].role: 'system': a system turn is read only as the first turn",
        "record 5 (id 'a8'), messages[0].content: a list of content parts: hyport reads text content "
        "(images as <image> placeholders with an images column)",
        "record 6, id: missing or empty id (other records of the file have one: every record needs one)"]
    assert [p.kind for p in problems] == ["unknown_role", "unknown_role", "not_text", "missing_id"]
    sharegpt = SHAREGPT + [{"id": "s-3", "conversations": [{"from": "assistant", "value": "Hello."},
                                                           {"from": "user", "value": "Hi?"}]},
                           {"id": "s-4", "conversations": [{"from": "user", "value": "q"},
                                                           {"from": "observation", "value": "tool said"}]},
                           {"id": "s-1", "system": "<image>", "conversations": SHAREGPT[1]["conversations"]}]
    problems = load_dataset(write_records(sharegpt, tmp_path / "s.parquet")).problems
    assert [(str(p), p.kind) for p in problems] == [
        ("record 3 (id 's-3'), conversations[0].from: the first turn is 'assistant'; it must be 'user'",
         "first_turn_not_human"),
        ("record 3 (id 's-3'), conversations[1]: the last turn is 'user': there is no answer to learn", "no_answer"),
        ("record 4 (id 's-4'), conversations[1].from: 'observation': tool turns (observation / function call) "
         "are not trained by hyport", "unknown_role"),
        ("record 5 (id 's-1'), system: <image> in the system prompt: images belong to the user turns",
         "image_in_system"),
        ("record 5 (id 's-1'), id: id 's-1' is already used by record 1", "duplicate_id")]


def test_a_value_that_is_not_text_is_not_called_empty(tmp_path):
    records = [{"messages": [{"role": "user", "content": 42}, {"role": "assistant", "content": {"text": "a"}}]},
               {"messages": [{"role": "system", "content": 5}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}]},
               {"messages": [{"role": "user", "content": "q"},
                             {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}]}]
    problems = load_dataset(write_records(records, tmp_path / "m.json")).problems
    assert [(str(p), p.kind) for p in problems] == [
        ("record 0, messages[0].content: expected text, got int", "not_text"),
        ("record 0, messages[1].content: expected text, got dict", "not_text"),
        ("record 1, messages[0].content: expected text, got int", "not_text"),
        ("record 2, messages[1].tool_calls: tool calls are not supported (hyport's smoke training learns text "
         "answers)", "not_text")]
    history = [{"instruction": "q", "output": "a", "history": [[1, "  "]]}]
    problems = load_dataset(write_records(history, tmp_path / "h.json")).problems
    assert [(str(p), p.kind) for p in problems] == [("record 0, history[0][0]: expected text, got int", "not_text"),
                                                    ("record 0, history[0][1]: empty or missing text", "empty_value")]


def test_an_empty_system_turn_is_no_system_prompt(tmp_path):
    """Review C4: as a blank system column is; the turn still wins over the column."""
    records = [{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}]},
               {"messages": [{"role": "system", "content": None}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}], "system": "from the column"}]
    report = load_dataset(write_records(records, tmp_path / "m.json"))
    assert report.problems == [] and [r.system for r in report.records] == [None, None]
    sharegpt = [{"conversations": [{"from": "system", "value": "  "}, {"from": "human", "value": "q"},
                                   {"from": "gpt", "value": "a"}]}]
    report = load_dataset(write_records(sharegpt, tmp_path / "s.json"))
    assert report.problems == [] and _read(report) == [(None, [("user", "q"), ("assistant", "a")])]


def test_an_unsupported_column_set_to_null_is_not_read_and_accepted(tmp_path):
    """Review C7: null means "not read" in LLaMA-Factory, so nothing unsupported is used."""
    info = _info_copy(tmp_path, {"nulls": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                                           "columns": {"messages": "conversations", "system": "system",
                                                       "tools": None, "videos": None, "audios": None},
                                           "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "user",
                                                    "assistant_tag": "assistant", "system_tag": "system"}},
                                 "named": {"file_name": "alpaca.json", "columns": {"response": "output",
                                                                                   "prompt": "instruction",
                                                                                   "kto_tag": "label"}}})
    report = load_dataset(info, options=DatasetOptions(entry="nulls"))
    assert report.problems == [] and _read(report) == EXPECTED["sharegpt"]
    assert "tools" not in report.layout.columns
    with pytest.raises(ValueError, match=r"entry 'named', columns.kto_tag: KTO feedback labels .* are not "
                                         r"supported; leave it out or set it to null \(not read\)$"):
        load_dataset(info, options=DatasetOptions(entry="named"))
    params = Params(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"tools": None, "chosen": None})
    report = load_dataset(params.dataset_path, options=params.dataset_options)
    assert _read(report) == EXPECTED["alpaca"] and "tools" not in report.layout.columns
    with pytest.raises(ParameterError, match=re.escape("dataset_columns['videos']: videos (hyport trains on text "
                                                       "and images) are not supported; leave it out or set it to "
                                                       "None (not read)")):
        Params(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"videos": "clip"})


def test_the_turns_column_of_the_other_format_is_named_when_the_one_read_is_missing(tmp_path):
    messages = write_records(MESSAGES[:1], tmp_path / "m.json")
    (problem,) = load_dataset(messages, options=DatasetOptions(format="sharegpt")).problems
    assert str(problem).endswith("conversations: missing (the record has 'messages': the openai format?)")
    sharegpt = write_records(SHAREGPT[:1], tmp_path / "s.json")
    (problem,) = load_dataset(sharegpt, options=DatasetOptions(format="openai")).problems
    assert str(problem).endswith("messages: missing (the record has 'conversations': the sharegpt format?)")


def _qa_turns(question: str, answer: str) -> list:
    return [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]


def test_a_tools_column_is_refused_unless_set_to_none(tmp_path):
    path = tmp_path / "tools.json"
    tools = json.dumps([{"name": "get_weather", "parameters": {}}])
    path.write_text(json.dumps([{"id": "t1", "tools": tools, "conversations": _qa_turns("Weather?", "Sunny.")},
                                {"id": "t2", "tools": "", "conversations": _qa_turns("Hi?", "Hello.")}]))
    report = load_dataset(path)
    assert [(p.index, p.field, p.kind) for p in report.problems] == [(0, "tools", "unsupported_column")]
    assert "dataset_columns={'tools': None}" in report.problems[0].message
    allowed = load_dataset(path, options=DatasetOptions(columns={"tools": None}))
    assert not allowed.problems and len(allowed.records) == 2
    # an entry reads only the columns it names (LLaMA-Factory reads no tools without columns.tools)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"chat": {"file_name": "tools.json",
                                                                     "formatting": "sharegpt"}}))
    assert not load_dataset(tmp_path, options=DatasetOptions(entry="chat")).problems


def test_convert_reads_one_record_in_its_layout_and_names_each_problem_where_it_is():
    """Without a file: each record's problems go to the sink as they are found, the content
    read so far comes back, and where its turns and system prompt were."""
    problems = []

    def sink(field, kind, message):
        problems.append((field, kind))

    content = convert({"instruction": "Add.", "input": "3 and 4", "output": 42, "history": [["a"]]},
                      layout_for("alpaca", {}, {}, "test"), sink)
    assert content.turns == [("user", "Add.\n3 and 4"), ("assistant", "")]
    assert content.text_field == "history/instruction/input/output" and content.system is None
    assert problems == [("history[0]", "bad_history"), ("output", "not_text")]
    problems.clear()
    sharegpt = layout_for("sharegpt", {}, {}, "test")
    value = {"id": " ", "image": ["a.png"], "images": ["b.png"],
             "conversations": [{"from": "system", "value": "Be brief."}, {"from": "gpt", "value": "hi"},
                               {"from": "human", "value": "<image> yo"}]}
    content = convert(value, sharegpt, sink)
    assert content.system == "Be brief." and content.system_field == "conversations[0].value"
    assert problems == [("conversations[1].from", "first_turn_not_human"), ("conversations[2]", "no_answer")]
    assert record_id_of(value, sharegpt) == (True, None)  # an id column, blank
    assert image_column(value, sharegpt, sink) == (["b.png"], "images")
    assert problems[-1] == ("image", "image_count")  # two image columns: give one
