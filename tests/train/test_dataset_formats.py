"""The record formats stage 04 reads (hyport_lib/train/dataset_formats.py): alpaca, sharegpt and
openai records read the same from JSON, JSON Lines and parquet, the format detected from the first
record that tells it (and what it cannot tell said in one line), column and tag names renamed,
and the images column as the seed's files name it. The sample files here are the other test
files' data too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.params import Params, SAMPLE_DATASETS as DATA


ALPACA = json.loads((DATA / "alpaca.json").read_text())


MESSAGES = json.loads((DATA / "openai_messages.json").read_text())


SHAREGPT = json.loads((DATA / "sharegpt_user_assistant.json").read_text())


#: What each sample file becomes: (system, turns) per record.
EXPECTED = {
    "alpaca": [(None, [("user", "Name the colour of a ripe banana."), ("assistant", "A ripe banana is yellow.")]),
               ("You are a careful calculator.", [("user", "Add the two numbers.\n3 and 4"),
                                                  ("assistant", "Three plus four is seven.")]),
               (None, [("user", "Add three and four."), ("assistant", "Three plus four is seven."),
                       ("user", "And what is that doubled?"), ("assistant", "Seven doubled is fourteen.")])],
    "openai": [("Answer in one short sentence.", [("user", "Where does the sun rise?"),
                                                   ("assistant", "The sun rises in the east.")]),
               (None, [("user", "What do bees make?"), ("assistant", "Bees make honey."),
                       ("user", "And what do they collect?"), ("assistant", "They collect nectar and pollen.")]),
               (None, [("user", "How many legs has a spider?"), ("assistant", "A spider has eight legs.")])],
    "sharegpt": [("You are a museum guide.", [("user", "Who painted the Mona Lisa?"),
                                              ("assistant", "Leonardo da Vinci painted it.")]),
                 (None, [("user", "What is the boiling point of water?"),
                         ("assistant", "Water boils at one hundred degrees Celsius.")]),
                 ("Reply like a sailor.", [("user", "Which way is north?"),
                                           ("assistant", "North is where the compass needle points.")])],
}


RECORDS = {"alpaca": ALPACA, "openai": MESSAGES, "sharegpt": SHAREGPT}


def write_records(records: list, path: Path) -> Path:
    """``records`` as a JSON list, JSON Lines or parquet file, by ``path``'s suffix."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = list(dict.fromkeys(k for r in records for k in r))  # from_pylist reads the first row's only
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in records]), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _read(report):
    return [(r.system, r.turns) for r in report.records]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
@pytest.mark.parametrize("format", ["alpaca", "sharegpt", "openai"])
def test_every_format_reads_the_same_from_every_file_type(tmp_path, format, suffix):
    path = write_records(RECORDS[format], tmp_path / f"data{suffix}")
    report = load_dataset(path)
    assert not report.problems, report.problems
    assert report.layout.format == format and report.layout.chosen_by.startswith("detected from record 0")
    assert _read(report) == EXPECTED[format]
    assert report.total == 3 and [r.index for r in report.records] == [0, 1, 2]
    ids = [r.record_id for r in report.records]
    assert ids == (["#0", "#1", "#2"] if format == "alpaca" else [r["id"] for r in RECORDS[format]])
    # the same file with its format given says so instead of "detected"
    given = load_dataset(path, options=DatasetOptions(format=format, tags=(
        {"user_tag": "user", "assistant_tag": "assistant"} if format == "sharegpt" else {})))
    assert _read(given) == EXPECTED[format] and given.layout.chosen_by == f"dataset_format={format!r}"


def test_detection_reads_the_tags_of_the_first_record_and_says_what_it_chose(tmp_path):
    seed = [{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
    layout = load_dataset(write_records(seed, tmp_path / "seed.json")).layout
    assert (layout.format, layout.tags["user_tag"], layout.tags["assistant_tag"]) == ("sharegpt", "human", "gpt")
    assert layout.describe() == "sharegpt (conversations; from/value; human/gpt)"
    layout = load_dataset(DATA / "sharegpt_user_assistant.json").layout
    assert (layout.tags["user_tag"], layout.tags["assistant_tag"]) == ("user", "assistant")
    assert layout.note() == ("detected from record 0 ('conversations' holds turns with 'from' tags): "
                             "sharegpt (conversations; from/value; user/assistant)")
    # role / content turns under "conversations" are openai-shaped
    odd = [{"conversations": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    report = load_dataset(write_records(odd, tmp_path / "odd.json"))
    assert report.layout.format == "openai" and _read(report) == [(None, [("user", "a"), ("assistant", "b")])]
    # the first record that is an object decides; the one before is named as no object
    mixed = ["not a record", ALPACA[0]]
    report = load_dataset(write_records(mixed, tmp_path / "mixed.json"))
    assert report.layout.chosen_by.startswith("detected from record 1")
    assert [(p.index, p.kind) for p in report.problems] == [(0, "not_object")]


def test_what_detection_cannot_tell_is_one_line_naming_the_record(tmp_path):
    with pytest.raises(ValueError, match=r"^dataset .*a.json: dataset_format='auto': record 0 has keys 'question', "
                                         r"'answer': not alpaca .*set dataset_format and dataset_columns$"):
        load_dataset(write_records([{"question": "q", "answer": "a"}], tmp_path / "a.json"))
    both = [{"conversations": [], "messages": []}]
    with pytest.raises(ValueError, match="record 0 has both 'conversations' and 'messages'"):
        load_dataset(write_records(both, tmp_path / "b.json"))
    odd_turns = [{"messages": [{"speaker": "user", "text": "q"}]}]
    with pytest.raises(ValueError, match=r"record 0, messages\[0\] has keys 'speaker', 'text': neither"):
        load_dataset(write_records(odd_turns, tmp_path / "c.json"))
    with pytest.raises(ValueError, match="detected alpaca from record 0, but dataset_tags: role tags apply"):
        load_dataset(DATA / "alpaca.json", options=DatasetOptions(tags={"user_tag": "user"}))


def test_columns_and_tags_rename_what_is_read(tmp_path):
    renamed = [{"question": "Where is Paris?", "context": "Geography.", "answer": "Paris is in France.",
                "persona": "You teach geography.", "before": [["Hi.", "Hello."]]}]
    columns = {"prompt": "question", "query": "context", "response": "answer", "system": "persona",
               "history": "before"}
    report = load_dataset(write_records(renamed, tmp_path / "r.json"), options=DatasetOptions(columns=columns))
    assert report.layout.format == "alpaca" and not report.problems
    assert _read(report) == [("You teach geography.", [("user", "Hi."), ("assistant", "Hello."),
                                                       ("user", "Where is Paris?\nGeography."),
                                                       ("assistant", "Paris is in France.")])]
    tags = {"role_tag": "speaker", "content_tag": "text", "user_tag": "client", "assistant_tag": "clerk"}
    options = DatasetOptions(format="sharegpt", columns={"messages": "dialog", "system": "persona"}, tags=tags)
    report = load_dataset(DATA / "chat_turns.jsonl", options=options)
    assert not report.problems and report.records[0].system == "You work in a bakery."
    assert report.records[1].turns == [("user", "Do you sell rye bread?"),
                                       ("assistant", "Yes, rye bread is baked every morning.")]
    # without the tags the same file is named record by record, in its own terms
    report = load_dataset(DATA / "chat_turns.jsonl", options=DatasetOptions(format="sharegpt",
                                                                            columns={"messages": "dialog"}))
    assert str(report.problems[0]) == ("record 0, dialog[0].from: missing (the role is read from 'from'; "
                                       "user tags: human; assistant tags: gpt)")


def test_images_are_read_from_images_or_the_seeds_image_column(tmp_path):
    from PIL import Image

    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    records = [{"instruction": "<image>What is it?", "output": "A black square.", "images": ["a.png"]},
               {"instruction": "<image>And this?", "output": "Also black.", "image": "a.png"},
               {"instruction": "<image>Both?", "output": "x", "image": "a.png", "images": ["a.png"]},
               {"instruction": "No picture <image>", "output": "y"}]
    report = load_dataset(write_records(records, tmp_path / "d.json"))
    assert [r.images for r in report.records] == [[str(tmp_path / "a.png")]] * 2
    assert [str(p) for p in report.problems] == [
        "record 2, image: both 'images' and 'image' hold images; give one",
        "record 3, images: 1 <image> placeholder in the user turns but 0 images"]


def test_one_record_that_does_not_tell_the_format_is_its_own_problem(tmp_path, monkeypatch):
    from hyport_lib.train import dataset as dataset_module

    good = {"id": "b", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    report = load_dataset(write_records([{"id": "a"}, {"id": "c", "conversations": None}, good], tmp_path / "a.json"))
    assert report.layout.chosen_by.startswith("detected from record 2") and report.layout.format == "sharegpt"
    assert [str(p) for p in report.problems] == ["record 0 (id 'a'), conversations: missing",
                                                 "record 1 (id 'c'), conversations: missing"]
    assert [r.record_id for r in report.records] == ["b"]
    # none tells it: one line naming the file and the first record's keys
    path = write_records([{"question": "q"}, {"question": "r"}], tmp_path / "b.jsonl")
    with pytest.raises(ValueError, match=r"b.jsonl: dataset_format='auto': record 0 has keys 'question': not "
                                         r"alpaca .* \(nor does any of the other 1 records\)$"):
        load_dataset(path)
    # ... and detection looks at a bounded number of records
    monkeypatch.setattr(dataset_module, "DETECT_LIMIT", 3)
    path = write_records([{"question": "q"}] * 5 + [ALPACA[0]], tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match=r"\(nor does any of the first 3 records\)$"):
        load_dataset(path)


def test_a_column_set_to_none_is_not_read_as_in_dataset_info_json():
    alpaca = str(DATA / "alpaca.json")
    params = Params(dataset_path=alpaca, dataset_columns={"query": None})
    report = load_dataset(params.dataset_path, options=params.dataset_options)
    assert report.records[1].turns[0] == ("user", "Add the two numbers.")  # its input is not read
    for columns, said in (({"response": None}, "dataset_columns['response']=None: it holds the answer"),
                          ({"prompt": None, "query": None}, "['query'] are both None"),
                          ({"prompt": 5}, "dataset_columns['prompt']=5: expected a column name (or None")):
        with pytest.raises(ParameterError, match=re.escape(said)):
            Params(dataset_path=alpaca, dataset_columns=columns)


_USER_ASSISTANT = [{"conversations": [{"from": "user", "value": f"q{i}"}, {"from": "assistant", "value": f"a{i}"}]}
                   for i in range(3)]


@pytest.mark.parametrize("first, said", [
    ({"conversations": [{"from": "user", "value": "hi"}]},
     "record 0, conversations[0]: the last turn is 'user': there is no answer to learn"),
    ({"conversations": []}, "record 0, conversations: must be a non-empty list of turns"),
    ({"conversations": [{"value": "hi"}, {"from": "assistant", "value": "yo"}]},
     "record 0, conversations[0].from: missing (the role is read from 'from'; user tags: user; assistant tags: "
     "assistant)"),
])
def test_a_record_that_cannot_show_both_role_tags_leaves_detection_to_the_next(tmp_path, first, said):
    """Review C1: one side of a dialogue (or none) does not tell the tags; the record after it
    does, and the first is then named as its own problem."""
    report = load_dataset(write_records([first] + _USER_ASSISTANT, tmp_path / "a.jsonl"))
    assert report.layout.chosen_by.startswith("detected from record 1")
    assert (report.layout.tags["user_tag"], report.layout.tags["assistant_tag"]) == ("user", "assistant")
    assert [str(p) for p in report.problems] == [said]
    assert [r.turns for r in report.records] == [[("user", f"q{i}"), ("assistant", f"a{i}")] for i in range(3)]


def test_a_record_that_cannot_show_the_role_tags_says_why_and_what_it_suggests():
    from hyport_lib.train.dataset_formats import UndetectedFormat, resolve_layout

    one_side = {"messages": [{"role": "user", "content": "q"}]}
    with pytest.raises(UndetectedFormat) as caught:
        resolve_layout(DatasetOptions(), (4, one_side))
    assert str(caught.value) == ("dataset_format='auto': record 4, messages: its 'role' tags ('user') show no "
                                 "assistant tag ('gpt' or 'assistant'); set dataset_tags user_tag and assistant_tag")
    # when no record of the file tells more, the turns column still says the format
    fallback = caught.value.fallback
    assert fallback.describe() == "openai (messages; role/content; user/assistant)"
    assert fallback.chosen_by.startswith("guessed from record 4")
    with pytest.raises(UndetectedFormat) as caught:
        resolve_layout(DatasetOptions(), (0, {"conversations": []}))
    assert caught.value.fallback.describe() == "sharegpt (conversations; from/value; human/gpt)"
    # tags the user gives need not be shown
    given = resolve_layout(DatasetOptions(tags={"assistant_tag": "bot"}), (0, one_side))
    assert (given.format, given.tags["user_tag"], given.tags["assistant_tag"]) == ("openai", "user", "bot")


def test_when_no_record_shows_both_role_tags_each_is_named_in_what_its_column_suggests(tmp_path):
    """Review C1: with no record to decide, the turns column (and the tags shown) still say the
    format; every record is then named as its own problem, not one error for the file."""
    one_sided = {"conversations": [{"from": "user", "value": "q"}]}
    report = load_dataset(write_records([one_sided, {"conversations": []}, one_sided], tmp_path / "a.json"))
    assert report.layout.note() == ("guessed from record 0 ('conversations' holds turns with 'from' tags; no record "
                                    "shows both a user and an assistant tag): sharegpt (conversations; from/value; "
                                    "user/gpt)")
    assert [str(p) for p in report.problems] == [
        "record 0, conversations[0]: the last turn is 'user': there is no answer to learn",
        "record 1, conversations: must be a non-empty list of turns",
        "record 2, conversations[0]: the last turn is 'user': there is no answer to learn"]
