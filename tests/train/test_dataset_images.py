"""A dataset's images (hyport_lib/train/dataset_images.py): the decoded size judged from the header
(its mode and the RGB copy), a file larger than any image refused before PIL reads it, each
image file decoded once, and an undecodable image named with its record, field and file."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from hyport_lib.train import dataset_images
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_images import DecodedImages, UnreadableImage, image_problem
from hyport_lib.train.samples import encode_records


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


def _qa_turns(question: str, answer: str) -> list:
    return [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]


def _image_records(folder: Path, count: int, image: str = "shared.png") -> Path:
    from PIL import Image

    Image.new("RGB", (64, 64), (200, 10, 10)).save(folder / image)
    path = folder / "data.json"
    path.write_text(json.dumps([{"id": f"r{i}", "image": image, "conversations": _qa_turns("<image>\nWhat?", "Red.")}
                                for i in range(count)]))
    return path


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


def test_an_image_undecodable_when_tokenised_names_record_field_and_file(tmp_path, processor):
    path = _image_records(tmp_path, 2)
    report = load_dataset(path)
    (tmp_path / "shared.png").write_bytes(b"no longer a png")  # changed after the check
    samples, problems = encode_records(report.records, processor, 512)
    assert not samples and [(p.index, p.field, p.kind) for p in problems] == [(0, "image", "image_unreadable"),
                                                                             (1, "image", "image_unreadable")]
    assert problems[0].message.startswith(f"record 0, image: image {tmp_path / 'shared.png'}: not a readable image")
