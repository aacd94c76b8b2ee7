"""The one reader for files in folders and trees the user names (utils/bounded_files.py)."""

from __future__ import annotations

import os
import time

import pytest

from hyport_lib.utils.bounded_files import (
    FileTooLarge, NotARegularFile, OutsideFolder, UnreadableFile, open_regular, read_bytes, read_text)


def test_a_regular_file_within_its_bound_is_read_whole(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 100)
    assert read_bytes(path, 100) == b"x" * 100
    assert read_text(path, 100, folder=tmp_path) == "x" * 100


def test_a_file_past_its_bound_is_refused_in_one_line_naming_it(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 101)
    with pytest.raises(FileTooLarge) as err:
        read_bytes(path, 100)
    assert str(err.value).startswith(f"{path}: larger than 100 bytes")
    assert "\n" not in str(err.value)


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path):
    fifo = tmp_path / "version.info"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(NotARegularFile, match="FIFO"):
        read_text(fifo, 1024)
    assert time.monotonic() - started < 5


def test_a_device_node_is_refused_before_it_is_opened():
    with pytest.raises(NotARegularFile, match="device node"):
        read_bytes("/dev/zero", 1024)


def test_a_folder_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(NotARegularFile, match="folder"):
        open_regular(tmp_path)
    with pytest.raises(UnreadableFile, match="no such file"):
        read_bytes(tmp_path / "absent", 10)


def test_a_link_out_of_the_folder_is_refused_and_one_inside_is_read(tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("secret")
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "real.txt").write_text("fine")
    (folder / "out.txt").symlink_to(secret)
    (folder / "in.txt").symlink_to(folder / "real.txt")
    with pytest.raises(OutsideFolder, match="a link out of"):
        read_text(folder / "out.txt", 100, folder=folder)
    assert read_text(folder / "in.txt", 100, folder=folder) == "fine"
    assert read_text(folder / "out.txt", 100) == "secret"  # no folder given: no containment asked


def test_a_model_folder_whose_config_is_a_fifo_is_not_waited_on(tmp_path):
    """`hyport env --model-path DIR` blocked for ever on a FIFO at DIR/config.json."""
    from hyport_lib.models.families import read_config
    from hyport_lib.models.loading import wants_video_processor

    os.mkfifo(tmp_path / "config.json")
    assert wants_video_processor(str(tmp_path)) == ("", None)
    with pytest.raises(NotARegularFile, match="config.json: a FIFO"):
        read_config(tmp_path)
