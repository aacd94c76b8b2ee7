"""A safetensors header read alone (:mod:`hyport_lib.checkpoint_files.header`): every defect of
the format is a finding of its class naming the file, never an exception, and a clean file's
tensors are what its header says."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from hyport_lib.checkpoint_files import header as H
from hyport_lib.checkpoint_files.header import read_header


def _write(path, entries: dict, data: bytes, length=None, raw: bytes | None = None):
    text = raw if raw is not None else json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def _entry(dtype="F32", shape=(2,), begin=0, end=8):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def _classes(shard) -> list[str]:
    return [f.cls for f in shard.findings]


def test_a_clean_file_is_read_from_its_header(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"b": np.zeros((2, 3), np.float32), "a": np.arange(4, dtype=np.int64)}, str(path),
              metadata={"format": "pt"})
    shard = read_header(path)
    assert shard.ok and shard.readable and shard.findings == [] and shard.metadata == {"format": "pt"}
    assert sorted(shard.tensors) == ["a", "b"] and shard.parameters == 10
    b = shard.tensors["b"]
    assert b.shape == (2, 3) and b.numel == 6 and b.nbytes == b.size_bytes == 24 and b.is_float
    assert not shard.tensors["a"].is_float and all(shard.can_read(t) for t in shard.tensors.values())
    assert shard.data_start + shard.data_len == path.stat().st_size and shard.label == path.name


@pytest.mark.parametrize("plant, cls", [
    (lambda p: p.write_bytes(b"\x01\x02"), "truncated_shard"),
    (lambda p: _write(p, {}, b"", length=10**6), "header_length_beyond_file"),
    (lambda p: _write(p, {}, b"", raw=b"{not json"), "header_not_json"),
    (lambda p: _write(p, {}, b"", raw=b"\xff\xfe{}"), "header_not_json"),
    (lambda p: _write(p, {}, b"", raw=b"[1, 2]"), "header_not_json"),
    (lambda p: _write(p, {}, b"", raw=b"[" * 100_000), "header_not_json"),
    (lambda p: _write(p, {"t": _entry(dtype="F33")}, b"\0" * 8), "header_bad_entry"),
    (lambda p: _write(p, {"t": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "header_bad_entry"),
    (lambda p: _write(p, {"t": _entry(shape=(-1,))}, b"\0" * 8), "header_bad_entry"),
    (lambda p: _write(p, {"t": {**_entry(), "data_offsets": [0, True]}}, b"\0" * 8), "header_bad_entry"),
    (lambda p: _write(p, {"__metadata__": {"n": 1}, "t": _entry()}, b"\0" * 8), "header_bad_entry"),
    (lambda p: _write(p, {"t": _entry(shape=(3,))}, b"\0" * 8), "size_mismatch"),
    (lambda p: _write(p, {"t": _entry(), "u": _entry(begin=4, end=12)}, b"\0" * 12), "offsets_overlap"),
    (lambda p: _write(p, {"t": _entry(begin=8, end=0)}, b"\0" * 8), "offsets_out_of_bounds"),
    (lambda p: _write(p, {"t": _entry(), "u": _entry(begin=12, end=20)}, b"\0" * 20), "offsets_not_covering"),
    (lambda p: _write(p, {"t": _entry()}, b"\0" * 12), "offsets_not_covering"),
    (lambda p: _write(p, {"t": _entry(), "u": _entry(begin=8, end=16)}, b"\0" * 12), "truncated_shard"),
])
def test_each_defect_is_a_finding_of_its_class_naming_the_file(tmp_path, plant, cls):
    path = tmp_path / "model.safetensors"
    plant(path)
    shard = read_header(path)
    assert cls in _classes(shard), shard.findings
    assert not shard.ok and all(f.file == "model.safetensors" and f.message for f in shard.findings)


@pytest.mark.parametrize("extra,said", [(1, "1 byte of the data buffer belongs to no tensor"),
                                        (4, "4 bytes of the data buffer belong to no tensor")])
def test_bytes_outside_every_tensor_are_counted_in_words(tmp_path, extra, said):
    shard = read_header(_write(tmp_path / "m.safetensors", {"t": _entry()}, b"\0" * (8 + extra)))
    (finding,) = [f for f in shard.findings if f.cls == "offsets_not_covering"]
    assert finding.message.startswith(said), finding.message


def test_a_header_past_safetensors_limit_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "MAX_HEADER_BYTES", 16)
    shard = read_header(_write(tmp_path / "m.safetensors", {"t": _entry()}, b"\0" * 8))
    assert _classes(shard) == ["header_too_large"] and not shard.readable


def test_a_fifo_is_named_never_opened(tmp_path):
    os.mkfifo(tmp_path / "m.safetensors")
    shard = read_header(tmp_path / "m.safetensors")  # open() would wait for a writer forever
    assert _classes(shard) == ["file_unreadable"] and "not a regular file" in shard.findings[0].message


def test_what_the_checks_pass_safetensors_still_judges(tmp_path, monkeypatch):
    import safetensors

    path = _write(tmp_path / "m.safetensors", {"t": _entry()}, b"\0" * 8)

    def refuses(*args, **kwargs):
        raise safetensors.SafetensorError("invalid header\nmore")

    monkeypatch.setattr(safetensors, "safe_open", refuses)
    assert read_header(path, validate=False).ok
    shard = read_header(path)
    assert _classes(shard) == ["safetensors_rejects"] and shard.findings[0].message.endswith("invalid header")


def test_reversed_offsets_count_the_tensors_size_and_a_wrong_length_is_never_read(tmp_path):
    shard = read_header(_write(tmp_path / "m.safetensors",
                               {"r": _entry(begin=8, end=0), "s": _entry(shape=(3,), begin=8, end=16)},
                               b"\0" * 16))
    reversed_, short = shard.tensors["r"], shard.tensors["s"]
    assert reversed_.nbytes == -8 and reversed_.size_bytes == 8  # dtype x shape, never negative
    assert short.expected_nbytes == 12 and not shard.can_read(short) and not shard.can_read(reversed_)


def test_a_packed_dtype_of_an_odd_count_has_no_whole_byte_size():
    odd = H.TensorEntry("t", "F4", (3,), 0, 2)
    assert odd.expected_nbytes is None and odd.size_bytes == 2
    assert H.TensorEntry("t", "F4", (4,), 0, 2).expected_nbytes == 2
