"""Review of issue 29's dataset bounds: a JSON Lines line is read up to a bound (a 1 GB
file without a line break was read whole, twice), a JSON list over its bound is refused
from its size (it was read up to 2 GiB first), an image's decoded size counts what PIL
holds (its mode's bytes and the RGB copy: a palette image took 5× the bound said), the
decode cache counts PIL's 4 bytes per RGB pixel, and an image file larger than any image
is refused before PIL reads it (a PNG with an 800 MB chunk: 2.4 GB)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from hyport_lib.train import dataset_files, dataset_images
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_images import DecodedImages, UnreadableImage, image_problem


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


def test_an_images_decoded_size_counts_its_mode_and_the_rgb_copy(tmp_path, monkeypatch):
    from PIL import Image

    Image.new("P", (64, 64), 0).save(tmp_path / "palette.png")  # 1 byte a pixel in the file's mode
    monkeypatch.setattr(dataset_images, "MAX_DECODED_IMAGE_BYTES", 64 * 64 * 4)  # the RGB copy alone is 4 a pixel
    kind, why = image_problem(tmp_path / "palette.png")
    assert kind == "image_too_large" and "64 × 64 pixels" in why
    with pytest.raises(UnreadableImage) as refused:
        DecodedImages().rgb(str(tmp_path / "palette.png"), 3, "image")
    assert refused.value.kind == "image_too_large" and "record 3, image" in str(refused.value)


def test_the_decode_cache_counts_the_bytes_pil_holds(tmp_path):
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (10, 10), (i, 0, 0)).save(tmp_path / f"{i}.png")
    cache = DecodedImages(budget=2 * 10 * 10 * 4)  # PIL holds an RGB pixel in 4 bytes
    for i in range(3):
        cache.rgb(str(tmp_path / f"{i}.png"), i, "image")
    assert cache.held == 2 * 10 * 10 * 4 and len(cache._images) == 2


def _png_with_a_large_chunk(path: Path, chunk_bytes: int) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress(b"".join(b"\0" + b"\0" * 24 for _ in range(8)))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
                     + chunk(b"zzZz", b"\0" * chunk_bytes) + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


def test_an_image_file_larger_than_any_image_is_refused_before_pil_reads_it(tmp_path, monkeypatch):
    _png_with_a_large_chunk(tmp_path / "chunky.png", 100_000)  # 8 × 8 pixels, a 100 KB chunk
    monkeypatch.setattr(dataset_images, "MAX_IMAGE_FILE_BYTES", 50_000)
    opened = []
    from PIL import Image

    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    kind, why = image_problem(tmp_path / "chunky.png")
    assert kind == "image_too_large" and "larger than" in why
    with pytest.raises(UnreadableImage) as refused:
        DecodedImages().rgb(str(tmp_path / "chunky.png"), 0, "images[1]")
    assert refused.value.kind == "image_too_large" and "images[1]" in str(refused.value)
    assert opened == []
