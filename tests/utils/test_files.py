"""hyport_lib.utils.files: atomic writes, strict JSON, a writable folder proven, a full disk said plainly."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import namedtuple

import pytest

from hyport_lib.utils import files
from hyport_lib.utils.files import atomic_write_json, atomic_write_text, disk_full_error, dumps_json, ensure_writable


def test_no_space_on_another_disk_is_not_this_folders_disk_being_full(tmp_path):
    # a full /dev/shm (or another disk) is not this folder's disk being full
    assert disk_full_error(RuntimeError("No space left on device (28)"), tmp_path, 10) is None


def test_a_failed_save_on_a_nearly_full_disk_is_one_enospc_error_naming_the_folder(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10 * 2**30, 10 * 2**30 - 512, 512))
    try:
        raise RuntimeError("[enforce fail at inline_container.cc] PytorchStreamWriter failed writing file")
    except RuntimeError as exc:
        found = disk_full_error(exc, tmp_path, 3 * 2**20)
    assert isinstance(found, OSError) and found.errno == errno.ENOSPC and found.filename == str(tmp_path)
    assert "512 B free, the checkpoint needs about 3.0 MiB" in str(found) and "\n" not in str(found)
    # an error that says nothing of writing is not taken for a full disk while bytes are free
    assert disk_full_error(ValueError("bad dtype"), tmp_path, 3 * 2**20) is None


def test_an_atomic_write_leaves_the_old_file_whole_when_it_fails_and_no_temporary_file(tmp_path):
    target = tmp_path / "sub" / "result.json"
    atomic_write_text(target, "old")
    assert target.read_text() == "old" and target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    with pytest.raises(ZeroDivisionError):
        with files.atomic_target(target) as tmp:
            open(tmp, "w").write("half")
            1 / 0
    assert target.read_text() == "old" and sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_json_is_strict_non_finite_floats_are_null_and_objects_text(tmp_path):
    data = {"loss": float("nan"), "grad": [float("inf"), 1.5], "where": tmp_path}
    assert json.loads(dumps_json(data)) == {"loss": None, "grad": [None, 1.5], "where": str(tmp_path)}
    written = atomic_write_json(tmp_path / "x.json", data)
    assert "NaN" not in written.read_text() and written.read_text().endswith("\n")


def test_a_folder_is_created_and_proven_writable_leaving_no_probe(tmp_path):
    folder = ensure_writable(tmp_path / "a" / "b")
    assert folder.is_dir() and not any(folder.iterdir())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        ensure_writable(blocker / "sub")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
