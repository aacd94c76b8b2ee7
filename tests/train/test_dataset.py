"""The dataset read into records (hyport_lib/train/dataset.py): every malformed record named with
its record and field before any process starts, whatever the file type, and the progress of
reading and tokenising said from the start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from hyport_lib.train.dataset import DatasetError, load_dataset, reporting_to
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.samples import encode_records

from .test_dataset_formats import ALPACA, write_records
from .test_dataset_info import _info_copy


def _turns(*pairs):
    return [{"from": who, "value": text} for who, text in pairs]


GOOD = _turns(("human", "<image>\nDescribe the image."), ("gpt", "A red circle."))


def _write(folder: Path, records) -> Path:
    (folder / "images").mkdir(exist_ok=True)
    from PIL import Image

    Image.new("RGB", (32, 32), (200, 10, 10)).save(folder / "images" / "ok.png")
    (folder / "images" / "broken.png").write_bytes(b"not a png at all")
    path = folder / "data.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


BAD_RECORDS = {
    "missing_id": {"image": "images/ok.png", "conversations": GOOD},
    "duplicate_id": {"id": "r-good", "image": "images/ok.png", "conversations": GOOD},
    "missing_conversations": {"id": "r-noconv", "image": "images/ok.png"},
    "empty_conversations": {"id": "r-empty", "conversations": []},
    "unknown_role": {"id": "r-role", "conversations": _turns(("human", "hi"), ("robot", "hello"))},
    "first_turn_not_human": {"id": "r-first", "conversations": _turns(("gpt", "hi"), ("human", "yo"),
                                                                      ("gpt", "ok"))},
    "roles_not_alternating": {"id": "r-alt", "conversations": _turns(("human", "a"), ("human", "b"),
                                                                     ("gpt", "c"))},
    "empty_value": {"id": "r-value", "conversations": _turns(("human", "question"), ("gpt", "  "))},
    "image_count": {"id": "r-count", "image": ["images/ok.png", "images/ok.png"],
                    "conversations": GOOD},
    "image_missing": {"id": "r-missing", "image": "images/nope.png", "conversations": GOOD},
    "image_unreadable": {"id": "r-broken", "image": "images/broken.png", "conversations": GOOD},
    "not_object": ["just", "a", "list"],
}


def test_every_malformed_record_kind_is_named_with_its_record(tmp_path):
    records = [{"id": "r-good", "image": "images/ok.png", "conversations": GOOD}]
    records += list(BAD_RECORDS.values())
    report = load_dataset(_write(tmp_path, records))
    kinds = {p.kind for p in report.problems}
    assert set(BAD_RECORDS) <= kinds, set(BAD_RECORDS) - kinds
    assert [r.record_id for r in report.records] == ["r-good"]
    by_kind = {p.kind: p for p in report.problems}
    for kind, record in BAD_RECORDS.items():
        problem = by_kind[kind]
        assert problem.index == next(i for i, r in enumerate(records) if r is record), kind
        expected_id = record.get("id") if isinstance(record, dict) else None
        assert problem.record_id == expected_id, kind
        text = str(problem)
        assert f"record {problem.index}" in text and problem.field in text
        if expected_id:
            assert expected_id in text
    assert by_kind["unknown_role"].field == "conversations[1].from"
    # the unknown last role is that problem only, not also "no answer"
    assert [p.kind for p in report.problems if p.record_id == "r-role"] == ["unknown_role"]
    assert by_kind["duplicate_id"].message.endswith("record 0")
    assert "2 images" in by_kind["image_count"].message


def test_json_lines_with_a_line_that_is_not_json(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"id": "a", "conversations": _turns(("human", "q"), ("gpt", "a"))})
                    + "\n{broken json\n\n"
                    + json.dumps({"id": "b", "conversations": _turns(("human", "q"), ("gpt", "a"))})
                    + "\n", encoding="utf-8")
    report = load_dataset(path)
    assert [r.record_id for r in report.records] == ["a", "b"]
    (problem,) = report.problems
    assert problem.kind == "not_json" and problem.index == 1 and problem.field == "line 2"


def test_a_file_that_is_not_json_at_all_names_the_file(tmp_path):
    path = tmp_path / "data.json"
    path.write_text("[{\"id\": 1,,]")
    with pytest.raises(ValueError, match="data.json: not valid JSON at line 1"):
        load_dataset(path)
    with pytest.raises(FileNotFoundError, match="dataset_path"):
        load_dataset(tmp_path / "missing.json")


def test_a_cut_image_a_turn_that_is_no_object_and_an_image_in_an_answer_are_named_in_a_bom_file(tmp_path):
    # images: a truncated JPEG, a turn that is no object, an image in an answer, a BOM
    img = tmp_path / "img"
    img.mkdir()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(img / "ok.jpg", quality=95)
    data = (img / "ok.jpg").read_bytes()
    (img / "cut.jpg").write_bytes(data[: len(data) // 2])
    records = [{"id": "cut", "image": "img/cut.jpg",
                "conversations": [{"from": "human", "value": "<image> what?"}, {"from": "gpt", "value": "x"}]},
               {"id": "str-turn", "conversations": ["hello", {"from": "gpt", "value": "a"}]},
               {"id": "img-answer", "image": "img/ok.jpg",
                "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "<image>"}]}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records), encoding="utf-8-sig")  # with a BOM
    report = load_dataset(path)
    kinds = {(p.record_id, p.kind) for p in report.problems}
    assert ("cut", "image_unreadable") in kinds and ("img-answer", "image_in_answer") in kinds
    assert ("str-turn", "unknown_role") in kinds and report.total == 3


def test_a_list_as_role_a_too_long_image_path_and_a_decompression_bomb_are_named(tmp_path):
    turns = [{"from": "human", "value": "<image> what?"}, {"from": "gpt", "value": "x"}]
    (tmp_path / "img").mkdir()
    bomb = Image.new("1", (1, 1))
    bomb.save(tmp_path / "img" / "bomb.png")
    raw = bytearray((tmp_path / "img" / "bomb.png").read_bytes())
    raw[16:24] = (20000).to_bytes(4, "big") * 2  # the IHDR claims 20000 x 20000 pixels
    (tmp_path / "img" / "bomb.png").write_bytes(bytes(raw))
    records = [{"id": "list-role", "conversations": [{"from": ["human"], "value": "q"}, turns[1]]},
               {"id": "long-path", "image": "a" * 5000 + ".png", "conversations": turns},
               {"id": "bomb", "image": "img/bomb.png", "conversations": turns}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records))
    kinds = {(p.record_id, p.kind) for p in load_dataset(path).problems}
    assert kinds >= {("list-role", "unknown_role"), ("long-path", "image_missing"), ("bomb", "image_unreadable")}


def test_one_json_object_over_several_lines_is_named_as_such(tmp_path):
    # named as one object, not as 5 lines that are not JSON
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"data": [{"id": "a", "conversations": _turns(("human", "q"), ("gpt", "a"))}]},
                                  indent=2))
    with pytest.raises(ValueError, match="wrapped.json: one JSON object .*expected a JSON list"):
        load_dataset(wrapped)


def test_dataset_error_lists_every_problem(tmp_path):
    records = [{"id": f"r{i}", "conversations": []} for i in range(3)]
    report = load_dataset(_write(tmp_path, records))
    error = DatasetError(report)
    assert len(error.details) == 3 and all("empty_conversations" not in d for d in error.details)
    assert all(f"'r{i}'" in error.details[i] for i in range(3))
    assert "skip_bad_records=True" in str(error)


def test_a_folder_given_as_the_dataset_is_named_as_a_folder(tmp_path):
    with pytest.raises(IsADirectoryError, match="dataset_path=.* is a folder"):
        load_dataset(tmp_path)


def test_non_json_constants_deep_nesting_and_odd_image_paths_are_named(tmp_path):
    import os

    (tmp_path / "nan.json").write_text('[{"id": NaN, "conversations": []}]')
    with pytest.raises(ValueError, match=r"nan.json: NaN is not JSON"):
        load_dataset(tmp_path / "nan.json")
    (tmp_path / "inf.jsonl").write_text('{"id": Infinity}\n')
    assert "Infinity is not JSON" in load_dataset(tmp_path / "inf.jsonl").problems[0].message
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match=r"deep.json: nested too deeply"):
        load_dataset(tmp_path / "deep.json")
    (tmp_path / "pictures").mkdir()
    os.mkfifo(tmp_path / "pipe.png")
    record = {"id": "x", "image": ["pictures", "pipe.png"],
              "conversations": [{"from": "human", "value": "<image><image>hi"}, {"from": "gpt", "value": "y"}]}
    (tmp_path / "odd.json").write_text(json.dumps([record]))
    messages = [p.message for p in load_dataset(tmp_path / "odd.json").problems]
    assert messages == ["'pictures': a folder, not an image file",
                        "'pipe.png': not a regular file (a pipe, device or socket)"]


def test_seed_records_without_ids_are_named_by_position_unless_the_file_uses_ids(tmp_path):
    """ids are optional (LLaMA-Factory's sharegpt has none), but a file that gives some
    records an id must give every record one."""
    text = _turns(("human", "Name a shape."), ("gpt", "A circle."))
    report = load_dataset(_write(tmp_path, [{"conversations": text}, {"conversations": text[:1]}]))
    assert [r.record_id for r in report.records] == ["#0"]
    assert [str(p) for p in report.problems] == [
        "record 1, conversations[0]: the last turn is 'human': there is no answer to learn"]
    report = load_dataset(_write(tmp_path, [{"conversations": text}, {"id": "b", "conversations": text}]))
    assert [r.record_id for r in report.records] == ["b"]
    assert [(p.index, p.kind, p.field) for p in report.problems] == [(0, "missing_id", "id")]


def test_a_problem_message_is_bounded_whatever_the_value_it_quotes(tmp_path):
    huge = "x" * 1_000_000
    record = {"id": "i" * 500, "image": huge,
              "conversations": [{"from": "human", "value": "<image>hi"}, {"from": "gpt", "value": "y"}]}
    (problem,) = load_dataset(_write(tmp_path, [record])).problems
    assert problem.kind == "image_missing" and "not a usable path (File name too long)" in problem.message
    assert len(problem.message) <= 240 and len(str(problem)) < 400


def test_every_file_type_without_records_says_so(tmp_path):
    for name, text in (("empty.json", "[]"), ("blank.json", " [ ]\n"), ("empty.jsonl", "\n\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=rf"dataset .*{name}: holds no records"):
            load_dataset(tmp_path / name)


def test_a_broken_json_lines_line_is_placed_on_its_own_line(tmp_path):
    (tmp_path / "cut.jsonl").write_text('{"instruction": "a", "output": "b"}\n{"instruction": "abc", "output": \n'
                                        '{"instruction": "a\x01", "output": "b"}\n')
    problems = load_dataset(tmp_path / "cut.jsonl").problems
    assert [str(p) for p in problems] == ["record 1, line 2: not JSON (Expecting value; column 34)",
                                          "record 2, line 3: not JSON (Invalid control character at; column 19)"]


def test_images_embedded_in_parquet_are_named_without_their_bytes(tmp_path):
    """Review C6: Hugging Face datasets writes an Image column to parquet as {bytes, path};
    hyport reads images from files and says so, without quoting the bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    png = b"\x89PNG\r\n\x1a\n" + bytes(200)
    row = {"messages": [{"role": "user", "content": "<image>What is it?"},
                        {"role": "assistant", "content": "A square."}],
           "images": [{"bytes": png, "path": "square.png"}]}
    path = tmp_path / "embedded.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    report = load_dataset(path)
    assert [(p.field, p.kind) for p in report.problems] == [("images[0]", "image_embedded")]
    message = report.problems[0].message
    assert "save them as files" in message and "PNG" not in message and "\\x" not in message


def _qa_turns(question: str, answer: str) -> list:
    return [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]


def test_reading_and_tokenising_say_how_far_they_are_from_the_start(tmp_path, processor):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "conversations": _qa_turns(f"Q{i}?", f"A{i}.")}) + "\n"
                            for i in range(30)))
    seen = []
    report = load_dataset(path, on_progress=seen.append)
    assert (seen[0].phase, seen[0].done, seen[0].total) == ("reading dataset", 0, None)  # before any record
    assert (seen[-1].done, seen[-1].total) == (30, 30) and seen[-1].path == str(path)
    seen.clear()
    with reporting_to(seen.append):  # how `hyport train` hears it through plan(params)
        encode_records(report.records, processor, 128)
    assert (seen[0].phase, seen[0].done, seen[0].total) == ("tokenising dataset", 0, 30)
    assert (seen[-1].done, seen[-1].total) == (30, 30)
    seen.clear()
    encode_records(report.records, processor, 128)  # outside the block: silent
    assert seen == []


def test_alpaca_records_may_have_ids(tmp_path):
    records = [{"id": "q1", **ALPACA[0]}, {"id": "q2", **ALPACA[1]}, {"id": "q1", **ALPACA[2]}]
    report = load_dataset(write_records(records, tmp_path / "a.parquet"))
    assert [r.record_id for r in report.records] == ["q1", "q2"]
    assert [str(p) for p in report.problems] == ["record 2 (id 'q1'), id: id 'q1' is already used by record 0"]


def test_ids_never_cost_an_entry_its_records_and_the_switch_is_named(tmp_path):
    """Review C3: LLaMA-Factory reads no id, so an entry reads one only when its columns name
    it; a plain file with repeated ids is refused with the way to do without them."""
    rows = [{"id": "src-a", **ALPACA[0]}, {"id": "src-a", **ALPACA[1]}, {**ALPACA[2]}]
    info = _info_copy(tmp_path, {"x": {"file_name": "x.json"},
                                 "x_ids": {"file_name": "x.json", "columns": {"prompt": "instruction",
                                                                              "query": "input", "response": "output",
                                                                              "id": "id"}}})
    write_records(rows, info.parent / "x.json")
    report = load_dataset(info, options=DatasetOptions(entry="x"))
    assert report.problems == [] and [r.record_id for r in report.records] == ["#0", "#1", "#2"]
    named = load_dataset(info, options=DatasetOptions(entry="x_ids"))
    assert [p.kind for p in named.problems] == ["duplicate_id", "missing_id"]
    plain = load_dataset(info.parent / "x.json")
    assert [p.kind for p in plain.problems] == ["duplicate_id", "missing_id"]
    assert any("dataset_columns={'id': None}" in line for line in DatasetError(plain).details)
    # the switch written as the CLI reads it: no record has a column named 'None'
    off = load_dataset(info.parent / "x.json", options=DatasetOptions(columns={"id": None}))
    assert off.problems == [] and len(off.records) == 3
    wrong = load_dataset(info.parent / "x.json", options=DatasetOptions(columns={"id": "None"}))
    assert {p.message for p in wrong.problems} == {"no record has the id column 'None' that dataset_columns names"}
    # an entry naming an id column no record has is said so too (review E6)
    info = _info_copy(tmp_path / "again", {"x_uid": {"file_name": "x.json", "columns": {
        "prompt": "instruction", "query": "input", "response": "output", "id": "uid"}}})
    write_records(rows, info.parent / "x.json")
    absent = load_dataset(info, options=DatasetOptions(entry="x_uid"))
    assert {p.message for p in absent.problems} == {"no record has the id column 'uid' that the entry's columns names"}
