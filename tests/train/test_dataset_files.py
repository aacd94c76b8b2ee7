"""Reading a dataset file (hyport_lib/train/dataset_files.py): JSON lists, JSON Lines and parquet
read within their bounds (a line, a list, a corrupt parquet column), files hyport does not read
said up front, and a repeated JSON key named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.train import dataset_files
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions

from .test_dataset_formats import ALPACA, write_records


def _record(rid: str, question: str = "Q?") -> str:
    return json.dumps({"id": rid, "conversations": [{"from": "human", "value": question},
                                                    {"from": "gpt", "value": "A."}]})


def test_a_json_lines_line_over_the_bound_is_a_problem_of_its_line_and_the_next_lines_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_files, "MAX_JSON_LINE_CHARS", 1000)
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([_record("a"), _record("b", "x" * 5000), _record("c")]) + "\n")
    report = load_dataset(path)
    assert [(p.index, p.field, p.kind) for p in report.problems] == [(1, "line 2", "not_json")]
    assert "longer than 1,000 characters" in report.problems[0].message
    assert [r.record_id for r in report.records] == ["a", "c"]


def test_a_json_lines_file_of_one_endless_line_is_one_error_naming_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_files, "MAX_JSON_LINE_CHARS", 1000)
    path = tmp_path / "data.jsonl"
    with open(path, "wb") as fh:  # a sparse file: NUL bytes, no line break
        fh.truncate(50_000)
    with pytest.raises(ValueError, match="no line of dataset .* is JSON .*longer than 1,000 characters"):
        load_dataset(path)


def test_a_json_list_over_its_bound_is_refused_from_its_size_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_files, "MAX_JSON_LIST_BYTES", 100)
    reads = []
    real = dataset_files.read_bytes
    monkeypatch.setattr(dataset_files, "read_bytes", lambda *a, **k: reads.append(a) or real(*a, **k))
    path = tmp_path / "data.json"
    path.write_text("[" + ",".join(_record(f"r{i}") for i in range(10)) + "]")
    with pytest.raises(ValueError, match="larger than .*JSON Lines"):
        load_dataset(path)
    broken = tmp_path / "broken.jsonl"  # a first line that is not JSON: the one-object check is skipped
    broken.write_text('{"id": "a", "conv\n' + "\n".join(_record(f"r{i}") for i in range(10)) + "\n")
    assert len(load_dataset(broken).records) == 10
    assert reads == []


def test_files_that_are_not_read_are_said_up_front(tmp_path, monkeypatch):
    (tmp_path / "d.csv").write_text("instruction,output\nq,a\n")
    with pytest.raises(ValueError, match=r"d.csv: CSV files are not read by hyport; convert it to JSON"):
        load_dataset(tmp_path / "d.csv")
    (tmp_path / "d.parquet").write_bytes(b"PAR1 but not really")
    with pytest.raises(ValueError, match=r"d.parquet: not a readable parquet file"):
        load_dataset(tmp_path / "d.parquet")
    # parquet is read a record batch at a time: a problem deep in the file keeps its row index
    monkeypatch.setattr(dataset_files, "PARQUET_BATCH_ROWS", 4)
    rows = [dict(ALPACA[0]) for _ in range(11)]
    rows[9] = {**ALPACA[0], "output": ""}
    report = load_dataset(write_records(rows, tmp_path / "many.parquet"))
    assert report.total == 11 and len(report.records) == 10 and [str(p) for p in report.problems] == [
        "record 9, output: empty"]


@pytest.mark.parametrize("name, text", [("rows.json", "instruction,output\nWhat is 2+2?,4\nName a fruit.,apple\n"),
                                        ("rows.jsonl", "- instruction: q\n  output: a\n")])
def test_a_file_with_no_json_line_is_one_error_naming_the_file(tmp_path, name, text):
    """Review C11: CSV or YAML under a JSON name is one line, not one problem per line."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError) as caught:
        load_dataset(tmp_path / name)
    message = str(caught.value)
    assert message.startswith(f"no line of dataset {tmp_path / name} is JSON (line 1: Expecting value, column 1): "
                              "is it CSV or YAML?") and "\n" not in message


def test_lines_that_are_not_json_stay_problems_when_another_line_is(tmp_path):
    path = tmp_path / "some.jsonl"
    path.write_text("instruction,output\n" + json.dumps(ALPACA[0]) + "\nq,a\n")
    report = load_dataset(path)
    assert [str(p) for p in report.problems] == ["record 0, line 1: not JSON (Expecting value; column 1)",
                                                 "record 2, line 3: not JSON (Expecting value; column 1)"]
    assert [r.index for r in report.records] == [1]


REPO = Path(__file__).resolve().parents[2]


def _qa_turns(question: str, answer: str) -> list:
    return [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]


def _corrupt_snappy_parquet(path: Path) -> Path:
    """Rows whose ``output`` column's compressed page is overwritten (snappy's OSError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 5000
    pq.write_table(pa.table({"instruction": [f"Question {i} " + "x" * (i % 50) for i in range(rows)],
                             "output": [f"Answer {i} " + "y" * (i % 70) for i in range(rows)]}),
                   path, compression="snappy", use_dictionary=False)
    data = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(0).column(1).data_page_offset + 100
    data[start:start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    return path


def test_corrupt_parquet_column_data_is_one_line_naming_file_and_column(tmp_path):
    path = _corrupt_snappy_parquet(tmp_path / "broken.parquet")
    with pytest.raises(ValueError) as raised:
        load_dataset(path)
    said = str(raised.value)
    assert said.startswith(f"dataset {path}: parquet data cannot be read from row 0 on (column 'output', "
                           "row group 0)") and "snappy" in said
    assert "\n" not in said


@pytest.mark.slow
def test_hyport_train_on_corrupt_parquet_exits_2_with_one_line(tmp_path):
    path = _corrupt_snappy_parquet(tmp_path / "broken.parquet")
    done = subprocess.run([sys.executable, "-m", "hyport_lib", "train", "--dataset-path", str(path),
                           "--output-dir", str(tmp_path / "out"), "--no-record"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"hyport train: dataset {path}: parquet data cannot be read") and "'output'" in last
    assert "reading dataset" in done.stderr  # the progress bar came first


def test_a_repeated_json_key_is_named_and_refused(tmp_path):
    listed = tmp_path / "dup.json"
    listed.write_text('[{"id": "d1", "conversations": [{"from": "human", "value": "first"}, {"from": "gpt", '
                      '"value": "A"}], "conversations": [{"from": "human", "value": "second"}, {"from": "gpt", '
                      '"value": "B"}]}, {"id": "ok", "conversations": [{"from": "human", "value": "q"}, '
                      '{"from": "gpt", "value": "a"}]}]')
    report = load_dataset(listed)
    assert [(p.index, p.field, p.kind) for p in report.problems] == [(0, "conversations", "duplicate_key")]
    assert [r.record_id for r in report.records] == ["ok"]
    lines = tmp_path / "dup.jsonl"
    lines.write_text('{"id": "d2", "conversations": [{"from": "human", "value": "q", "value": "q2"}, '
                     '{"from": "gpt", "value": "A"}]}\n')
    assert [p.field for p in load_dataset(lines).problems] == ["conversations[0].value"]
    (tmp_path / "dataset_info.json").write_text('{"chat": {"file_name": "dup.json"}, "chat": {"file_name": "x"}}')
    with pytest.raises(ValueError, match="dataset_info.json: the key 'chat' appears more than once"):
        load_dataset(tmp_path, options=DatasetOptions(entry="chat"))
