"""Stage 05's full scan (:mod:`hyport_lib.weights.scan`): chunked, pipelined reads that find
every NaN/Inf (at chunk boundaries too), checksums of each algorithm equal to that algorithm
applied to the tensor's bytes whatever the workers' race, one buffer per worker, read
errors as findings naming the file that failed (the next files still scanned), every other
error raised (none lost, no tensor silently left out), scans of two algorithms never
compared."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash
from safetensors.torch import save_file

from hyport_lib.checkpoint_files.header import read_header
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights import checksums, scan
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.scan import TensorScan, full_scan, nonfinite_counts
from hyport_lib.weights.scan_reads import plan_reads, scan_jobs

#: Each algorithm, computed here from the bytes without the library's code.
EXPECTED = {
    "xxh3": lambda data: xxhash.xxh3_64(data).hexdigest(),
    "crc32": lambda data: f"{zlib.crc32(data):08x}",
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
}


@pytest.fixture(scope="module")
def tiny():
    return ensure_tiny_model()


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _file_tensors(path: Path) -> dict[str, bytes]:
    """Each tensor's bytes, read from the file by the safetensors layout itself (an
    8-byte little-endian header length, the JSON header, then the data section)."""
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8: 8 + length])
    data = blob[8 + length:]
    return {k: data[v["data_offsets"][0]: v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize("dtype,name", [(torch.float32, "F32"), (torch.bfloat16, "BF16"),
                                        (torch.float16, "F16"), (torch.float64, "F64"),
                                        (torch.float8_e5m2, "F8_E5M2")])
def test_nonfinite_counts_on_raw_bits(dtype, name):
    x = torch.linspace(-3, 3, 4096).to(dtype)
    assert nonfinite_counts(_raw(x), name) == (0, 0)
    x[5], x[77], x[4095] = float("nan"), float("inf"), float("-inf")
    assert nonfinite_counts(_raw(x), name) == (1, 2)
    x[6] = float("nan")
    negative_nan = bytearray(_raw(x))
    negative_nan[7 * x.element_size() - 1] |= 0x80  # the sign bit (little-endian: the last byte)
    assert nonfinite_counts(negative_nan, name) == (2, 2)  # found by the unsigned view's maximum
    for sign in (1, -1):  # the largest finite values, exponent not all ones
        largest = torch.full((8,), sign * torch.finfo(dtype).max, dtype=dtype)
        assert nonfinite_counts(_raw(largest), name) == (0, 0)


@pytest.mark.parametrize("value,expected", [(0x7F, (1, 0)), (0xFF, (1, 0)), (0x7E, (0, 0)), (0xFE, (0, 0))])
def test_float8_e4m3_has_nan_only_at_all_ones(value, expected):
    data = bytes([0x38, 0xB8, value, 0x00])  # 1.0, -1.0, the value under test, 0
    assert nonfinite_counts(data, "F8_E4M3") == expected
    assert nonfinite_counts(bytes([0x7F, 0x00, 0xFE, value]), "F8_E8M0") == ((value == 0xFF), 0)


def test_integers_are_never_non_finite():
    assert nonfinite_counts(np.full(16, -1, np.int32).tobytes(), "I32") == (0, 0)


def _mixed_file(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    a = torch.randn(1000)
    a[15], a[16], a[999] = float("nan"), float("inf"), float("nan")  # both sides of a boundary, the last
    b = torch.randn(333).to(torch.bfloat16)
    b[32] = float("-inf")
    tensors = {"a": a, "b": b, "c": torch.arange(10, dtype=torch.int64), "empty": torch.empty(0),
               "small": torch.randn(3).to(torch.float16), "big": torch.randn(5_000)}
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path))
    return path, tensors


def test_the_default_checksum_is_xxh3(tmp_path):
    from hyport_lib.params import parameter_fields
    from hyport_lib.weights.params import Params

    assert Params().checksum == "xxh3" == checksums.DEFAULT_CHECKSUM
    checksum = next(f for f in parameter_fields(Params) if f.name == "checksum")
    assert checksum.spec.choices == ("xxh3", "crc32", "sha256")
    path, tensors = _mixed_file(tmp_path)
    result = full_scan([read_header(path)])
    assert result.checksum == "xxh3"
    assert {t.algorithm for t in result.tensors.values()} == {"xxh3"}
    assert result.tensors["a"].checksum == xxhash.xxh3_64(_raw(tensors["a"])).hexdigest()


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_each_algorithm_checksums_the_tensors_bytes_whatever_the_chunk_size(tmp_path, algorithm):
    path, _ = _mixed_file(tmp_path)
    on_disk = _file_tensors(path)
    shard = read_header(path)
    expected = {k: EXPECTED[algorithm](v) for k, v in on_disk.items()}
    whole = full_scan([shard], checksum=algorithm, chunk_bytes=1 << 20)  # every tensor in one chunk
    assert {k: t.checksum for k, t in whole.tensors.items()} == expected
    for chunk_bytes in (8, 24, 64, 4096):  # "big" (20 kB) spans 5 to 2,500 chunks
        result = full_scan([shard], checksum=algorithm, chunk_bytes=chunk_bytes, workers=3)
        assert {k: t.checksum for k, t in result.tensors.items()} == expected, chunk_bytes
        assert {k: (t.nan, t.inf) for k, t in result.tensors.items()} == \
            {k: (t.nan, t.inf) for k, t in whole.tensors.items()}, chunk_bytes
        assert result.bytes_read == whole.bytes_read == sum(map(len, on_disk.values()))


def test_scan_finds_values_at_chunk_boundaries(tmp_path):
    chunk = 64  # bytes: 16 float32 per chunk, so every tensor spans many chunks
    path, tensors = _mixed_file(tmp_path)
    shard = read_header(path)
    seen = []
    result = full_scan([shard], chunk_bytes=chunk, on_progress=seen.append, min_interval_s=0)
    assert (result.tensors["a"].nan, result.tensors["a"].inf) == (2, 1)
    assert (result.tensors["b"].nan, result.tensors["b"].inf) == (0, 1)
    assert (result.tensors["c"].nan, result.tensors["c"].inf) == (0, 0)
    assert sorted(result.nonfinite_tensors) == ["a", "b"]
    assert set(result.tensors) == set(tensors)
    assert result.bytes_read == path.stat().st_size - shard.data_start
    assert seen[-1].done_bytes == seen[-1].total_bytes == result.bytes_read
    assert seen[-1].tensors_done == seen[-1].tensors_total == len(tensors)
    assert [f.cls for f in result.findings] == ["non_finite"]
    assert result.findings[0].file == "m.safetensors" and set(result.findings[0].tensors) == {"a", "b"}


def test_jobs_cover_every_tensor_once_largest_first(tmp_path):
    path, tensors = _mixed_file(tmp_path)
    plan = plan_reads([read_header(path)])[0]
    for chunk_bytes in (8, 64, 4096, 1 << 20):
        (file,), jobs = scan_jobs(plan, chunk_bytes)
        assert file.jobs_left == len(jobs) > 0
        names = [e.name for job in jobs for e in job.entries]
        assert sorted(names) == sorted(tensors)  # each once
        for job in jobs:
            for before, after in zip(job.entries, job.entries[1:]):
                assert after.begin == before.end  # a group is one read of tensors back to back
            assert len(job.entries) == 1 or job.nbytes <= chunk_bytes  # larger: one tensor, read in chunks
        sizes = [job.nbytes for job in jobs]
        assert sizes == sorted(sizes, reverse=True)  # the workers end together
    (_,), jobs = scan_jobs(plan, 1 << 20)
    assert len(jobs) == 1  # 36 kB of tensors: one read for all of them


def test_workers_that_race_still_checksum_every_tensor_and_list_them_in_file_order(tmp_path, monkeypatch):
    """Jobs run side by side (a slow check lets the other workers run ahead): each tensor's
    checksum is that of its bytes, and the record lists the tensors in file order."""
    path, _ = _mixed_file(tmp_path)
    on_disk = _file_tensors(path)
    counts, calls = scan.nonfinite_counts, []

    def uneven(data, dtype):  # every other check slow
        calls.append(1)
        if len(calls) % 2:
            time.sleep(0.002)
        return counts(data, dtype)

    monkeypatch.setattr(scan, "nonfinite_counts", uneven)
    result = _finishes(lambda: full_scan([read_header(path)], chunk_bytes=64, workers=3))
    assert len(calls) > 100  # "big" alone spans hundreds of chunks
    assert list(result.tensors) == sorted(on_disk, key=lambda k: read_header(path).tensors[k].begin)
    assert {k: t.checksum for k, t in result.tensors.items()} == {k: EXPECTED["xxh3"](v) for k, v in on_disk.items()}
    assert result.bytes_read == sum(map(len, on_disk.values()))


def test_no_buffer_is_overwritten_while_a_consumer_reads_it(tmp_path, monkeypatch):
    """A slow hasher and a slow check keep every chunk's bytes until they are done."""
    path, _ = _mixed_file(tmp_path)
    shard = read_header(path)
    buffers, problems = set(), []

    def slow(read_view):
        before = bytes(read_view)
        time.sleep(0.001)
        if bytes(read_view) != before:
            problems.append("a buffer changed while in use")
        buffers.add(id(read_view.obj))

    class SlowHasher:
        def __init__(self):
            self.inner = xxhash.xxh3_64()

        def update(self, data):
            slow(data)
            self.inner.update(data)

        def hexdigest(self):
            return self.inner.hexdigest()

    counts = scan.nonfinite_counts
    monkeypatch.setitem(checksums.HASHERS, "xxh3", SlowHasher)
    monkeypatch.setattr(scan, "nonfinite_counts", lambda data, dtype: (slow(data), counts(data, dtype))[1])
    result = full_scan([shard], chunk_bytes=256, workers=3)
    assert not problems and 1 < len(buffers) <= 3  # one buffer per worker, reused
    assert result.tensors["a"].checksum == EXPECTED["xxh3"](_file_tensors(path)["a"])
    assert (result.tensors["a"].nan, result.tensors["a"].inf) == (2, 1)


def _finishes(fn, seconds=30):
    """``fn()``'s result (or its exception, raised here), or a failure when it takes longer
    than ``seconds``: a hung scan fails the test instead of hanging the test run."""
    out = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread below
            out["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_file_that_shrinks_under_the_scan_is_a_finding_not_a_hang(tmp_path):
    path, tensors = _mixed_file(tmp_path)
    shard = read_header(path)  # the header as it was: every tensor inside the file
    on_disk = _file_tensors(path)
    entries = sorted(shard.tensors.values(), key=lambda e: e.begin)
    cut = next(e for e in entries if e.name == "big")
    with open(path, "r+b") as fh:
        fh.truncate(shard.data_start + cut.begin + 1000)  # ends inside "big"
    result = _finishes(lambda: full_scan([shard], chunk_bytes=512, workers=2))
    assert [f.cls for f in result.findings if f.cls != "non_finite"] == ["file_unreadable"]
    unreadable = next(f for f in result.findings if f.cls == "file_unreadable")
    assert unreadable.file == "m.safetensors" and "`big`" in unreadable.message
    before = {e.name for e in entries if e.end <= cut.begin}
    assert set(result.tensors) == before and "big" not in result.tensors
    assert sorted(result.skipped) == sorted(set(tensors) - before)  # never silently left out
    for name in before:  # what was read before the error is kept, and right
        assert result.tensors[name].checksum == EXPECTED["xxh3"](on_disk[name])


def test_a_defect_in_the_hasher_is_raised_not_hidden(tmp_path, monkeypatch):
    path, _ = _mixed_file(tmp_path)

    class Broken:
        def update(self, data):
            raise RuntimeError("hasher defect")

    monkeypatch.setitem(checksums.HASHERS, "crc32", Broken)
    with pytest.raises(RuntimeError, match="hasher defect"):
        _finishes(lambda: full_scan([read_header(path)], checksum="crc32", chunk_bytes=64, workers=2))


def test_a_hash_defect_on_the_last_tensor_is_raised_and_the_reader_stopped(tmp_path, monkeypatch):
    """The checksum of the last tensor fails: the scan raises, never returns a result
    short of that tensor, and leaves no reader thread behind."""
    path, tensors = _mixed_file(tmp_path)
    calls = []

    class FailsOnTheLast:
        def __init__(self):
            self.inner = checksums.new_hasher("crc32")

        def update(self, data):
            self.inner.update(data)

        def hexdigest(self):
            calls.append(1)
            if len(calls) == len(tensors):
                raise RuntimeError("defect in the last checksum")
            return self.inner.hexdigest()

    monkeypatch.setitem(checksums.HASHERS, "xxh3", FailsOnTheLast)
    with pytest.raises(RuntimeError, match="defect in the last checksum"):
        _finishes(lambda: full_scan([read_header(path)]))
    assert len(calls) == len(tensors)
    assert not [t for t in threading.enumerate() if t.name.startswith("hyport-weights")]


def test_a_file_swapped_for_a_fifo_after_its_header_is_a_finding_not_a_hang(tmp_path):
    paths = [tmp_path / f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    save_file({"a": torch.randn(1000)}, str(paths[0]))
    save_file({"b": torch.randn(1000)}, str(paths[1]))
    shards = [read_header(p) for p in paths]  # the headers as they were: regular files
    expected_b = EXPECTED["xxh3"](_file_tensors(paths[1])["b"])
    paths[0].unlink()
    os.mkfifo(paths[0])  # no writer ever comes: a blocking open would wait for good
    result = _finishes(lambda: full_scan(shards, chunk_bytes=512, workers=2), seconds=10)
    assert [(f.cls, f.file) for f in result.findings] == [("file_unreadable", paths[0].name)]
    assert "is no longer a regular file" in result.findings[0].message
    assert result.skipped == ["a"] and result.tensors["b"].checksum == expected_b


@pytest.mark.parametrize("how", ["absent", "refused"])
def test_the_read_ahead_hint_is_only_a_hint(tmp_path, monkeypatch, how):
    """No ``posix_fadvise`` (macOS), or one that fails: the same checksums, no finding."""
    path, _ = _mixed_file(tmp_path)
    expected = {k: EXPECTED["xxh3"](v) for k, v in _file_tensors(path).items()}
    asked = []

    def refuse(*args):
        asked.append(args)
        raise OSError(29, "Illegal seek")

    if how == "absent":
        monkeypatch.delattr(os, "posix_fadvise")
    else:
        monkeypatch.setattr(os, "posix_fadvise", refuse)
    result = _finishes(lambda: full_scan([read_header(path)], chunk_bytes=512, workers=2))
    assert {k: t.checksum for k, t in result.tensors.items()} == expected
    assert [f.cls for f in result.findings] == ["non_finite"] and not result.skipped
    assert (how == "absent") == (not asked)  # "big" (20 kB) is read in chunks: the hint was asked


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_a_file_that_fails_is_named_and_the_next_files_are_still_scanned(tmp_path, how):
    paths = [tmp_path / f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    save_file({"a": torch.randn(1000)}, str(paths[0]))
    save_file({"b1": torch.randn(1000), "b2": torch.randn(1000)}, str(paths[1]))
    save_file({"c": torch.randn(1000)}, str(paths[2]))
    shards = [read_header(p) for p in paths]  # the headers as they were
    on_disk = {k: v for p in paths for k, v in _file_tensors(p).items()}
    first, second = sorted(shards[1].tensors.values(), key=lambda e: e.begin)
    if how == "truncated":  # inside the second tensor of the middle file: the first is kept
        with open(paths[1], "r+b") as fh:
            fh.truncate(shards[1].data_start + second.begin + 1000)
        kept, lost = {"a", first.name, "c"}, [second.name]
    else:
        paths[1].unlink()
        kept, lost = {"a", "c"}, [first.name, second.name]
    result = _finishes(lambda: full_scan(shards, chunk_bytes=512, workers=2))
    assert [(f.cls, f.file) for f in result.findings] == [("file_unreadable", paths[1].name)]
    assert set(result.tensors) == kept and sorted(result.skipped) == sorted(lost)
    for name in kept:
        assert result.tensors[name].checksum == EXPECTED["xxh3"](on_disk[name])
        assert result.tensors[name].file == next(s.label for s in shards if name in s.tensors)


def test_errors_outside_the_weights_files_are_raised_not_findings(tmp_path, monkeypatch):
    """Only the reader's errors about a file are findings: an OSError of the progress
    callback (a closed pipe) or of the hasher is the caller's to see."""
    path, _ = _mixed_file(tmp_path)
    shard = read_header(path)

    calls = []

    def progress(update):  # fails once (a pipe closed for a moment), then works
        calls.append(update)
        if len(calls) == 1:
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        _finishes(lambda: full_scan([shard], chunk_bytes=64, on_progress=progress, min_interval_s=0))

    class Failing:
        def update(self, data):
            raise OSError("the hasher's own failure")

    monkeypatch.setitem(checksums.HASHERS, "xxh3", Failing)
    with pytest.raises(OSError, match="the hasher's own failure"):
        _finishes(lambda: full_scan([shard], chunk_bytes=64, workers=2))
    assert not [t for t in threading.enumerate() if t.name.startswith("hyport-weights") and t.is_alive()]


def test_a_tensor_scan_always_names_its_algorithm():
    """No default algorithm: a CRC-32 record cannot claim XXH3 by omission."""
    crc = f"{zlib.crc32(b'abc'):08x}"
    with pytest.raises(TypeError, match="algorithm"):
        TensorScan("f", crc)
    with pytest.raises(ValueError, match="algorithm=''"):
        TensorScan("f", crc, algorithm="")


def test_scan_bad_arguments_name_themselves(tiny):
    from hyport_lib.params import parameter_fields
    from hyport_lib.weights.params import Params

    shards = inspect_checkpoint(tiny, with_model=False).shards
    # the checksum is a stage parameter, refused by Params before any scan (tests/test_params.py)
    checksum = next(f for f in parameter_fields(Params) if f.name == "checksum")
    assert set(checksum.spec.choices) == set(checksums.HASHERS)
    with pytest.raises(ValueError, match="^checksum='md5': expected one of"):
        full_scan(shards, checksum="md5")
    with pytest.raises(ValueError, match="chunk_bytes=100"):
        full_scan(shards, chunk_bytes=100)
    with pytest.raises(ValueError, match="workers=0"):
        full_scan(shards, workers=0)


def test_scan_skips_tensors_outside_a_truncated_file(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes((tiny / "model.safetensors").read_bytes()[:-1000])
    shard = read_header(path)
    result = full_scan([shard])
    assert result.skipped and not set(result.skipped) & set(result.tensors)
    assert len(result.tensors) + len(result.skipped) == 64
