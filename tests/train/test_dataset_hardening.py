"""Stage 04's dataset readers against what a probe found (issue 29, datasets): progress
said while 100,000 records are read and tokenised, an image that is huge decoded refused
from its header and each image file decoded once, a corrupt parquet column, a FIFO or a
NUL byte as an entry's file, an undecodable image named with its record and field, an
unsupported ``tools`` column and a repeated JSON key refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.train import dataset_images
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.dataset import reporting_to
from hyport_lib.train.samples import encode_records

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def processor():
    from hyport_lib.models.loading import load_processor
    from hyport_lib.models.tiny import ensure_tiny_model

    return load_processor(ensure_tiny_model())


def _turns(question: str, answer: str) -> list:
    return [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]


def _image_records(folder: Path, count: int, image: str = "shared.png") -> Path:
    from PIL import Image

    Image.new("RGB", (64, 64), (200, 10, 10)).save(folder / image)
    path = folder / "data.json"
    path.write_text(json.dumps([{"id": f"r{i}", "image": image, "conversations": _turns("<image>\nWhat?", "Red.")}
                                for i in range(count)]))
    return path


def test_reading_and_tokenising_say_how_far_they_are_from_the_start(tmp_path, processor):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "conversations": _turns(f"Q{i}?", f"A{i}.")}) + "\n"
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


def test_an_image_too_large_decoded_is_refused_from_its_header_naming_record_and_field(tmp_path, monkeypatch):
    path = _image_records(tmp_path, 2)
    monkeypatch.setattr(dataset_images, "MAX_DECODED_IMAGE_BYTES", 64 * 64 * 3 - 1)
    loads = []
    from PIL import ImageFile

    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: (loads.append(1) if self.tile else None)
                        or real_load(self))
    report = load_dataset(path)
    assert [(p.index, p.field, p.kind) for p in report.problems] == [(0, "image", "image_too_large"),
                                                                    (1, "image", "image_too_large")]
    assert "64 × 64 pixels (RGB)" in report.problems[0].message
    assert str(tmp_path / "shared.png") in report.problems[0].message
    assert loads == []  # judged from the header: no pixel decoded


def test_an_image_shared_by_five_records_is_decoded_once_to_check_and_once_to_tokenise(tmp_path, monkeypatch,
                                                                                       processor):
    path = _image_records(tmp_path, 5)
    from PIL import ImageFile

    loads = []  # one per decode: an image whose pixels are still to be read holds its tiles
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: (loads.append(1) if self.tile else None)
                        or real_load(self))
    report = load_dataset(path)
    assert len(report.records) == 5 and len(loads) == 1
    samples, problems = encode_records(report.records, processor, 512)
    assert len(samples) == 5 and not problems and len(loads) == 2


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


def test_an_entrys_file_that_is_a_fifo_or_holds_a_nul_byte_is_named_as_such(tmp_path):
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"piped": {"file_name": "pipe.json"},
                                                            "nul": {"file_name": "a\0b.json"}}))
    with pytest.raises(ValueError, match=r"entry 'piped', file_name: 'pipe.json' \(.*\): a FIFO \(named pipe\), "
                                         "not a regular file"):
        load_dataset(tmp_path, options=DatasetOptions(entry="piped"))
    with pytest.raises(ValueError, match=r"entry 'nul', file_name: 'a\\x00b.json': not a usable path \(a NUL byte\)"):
        load_dataset(tmp_path, options=DatasetOptions(entry="nul"))
    with pytest.raises(ValueError, match="pipe.json'?: a FIFO"):  # given directly: never opened, never waited on
        load_dataset(tmp_path / "pipe.json")


def test_an_image_undecodable_when_tokenised_names_record_field_and_file(tmp_path, processor):
    path = _image_records(tmp_path, 2)
    report = load_dataset(path)
    (tmp_path / "shared.png").write_bytes(b"no longer a png")  # changed after the check
    samples, problems = encode_records(report.records, processor, 512)
    assert not samples and [(p.index, p.field, p.kind) for p in problems] == [(0, "image", "image_unreadable"),
                                                                             (1, "image", "image_unreadable")]
    assert problems[0].message.startswith(f"record 0, image: image {tmp_path / 'shared.png'}: not a readable image")


def test_a_tools_column_is_refused_unless_set_to_none(tmp_path):
    path = tmp_path / "tools.json"
    tools = json.dumps([{"name": "get_weather", "parameters": {}}])
    path.write_text(json.dumps([{"id": "t1", "tools": tools, "conversations": _turns("Weather?", "Sunny.")},
                                {"id": "t2", "tools": "", "conversations": _turns("Hi?", "Hello.")}]))
    report = load_dataset(path)
    assert [(p.index, p.field, p.kind) for p in report.problems] == [(0, "tools", "unsupported_column")]
    assert "dataset_columns={'tools': None}" in report.problems[0].message
    allowed = load_dataset(path, options=DatasetOptions(columns={"tools": None}))
    assert not allowed.problems and len(allowed.records) == 2
    # an entry reads only the columns it names (LLaMA-Factory reads no tools without columns.tools)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"chat": {"file_name": "tools.json",
                                                                     "formatting": "sharegpt"}}))
    assert not load_dataset(tmp_path, options=DatasetOptions(entry="chat")).problems


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
