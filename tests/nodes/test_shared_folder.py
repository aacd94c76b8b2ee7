"""Node 0's token in the shared folder: written fresh, read back bounded, never waited on."""

from __future__ import annotations

import os

from hyport_lib.nodes.shared_folder import MAX_TOKEN_BYTES, read_token, token_path, write_token


def test_a_token_written_is_read_back_and_a_second_one_differs(tmp_path):
    first = write_token(tmp_path)
    assert len(first) == 32 and read_token(tmp_path) == first
    assert write_token(tmp_path) != first and read_token(tmp_path) != first


def test_what_is_no_token_reads_as_none(tmp_path):
    assert read_token(tmp_path) is None  # none written yet
    os.mkfifo(token_path(tmp_path))  # a FIFO would block a plain read for ever
    assert read_token(tmp_path) is None
    os.unlink(token_path(tmp_path))
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("0" * 32)
    os.symlink(outside, token_path(tmp_path))  # a link out of the shared folder
    assert read_token(tmp_path) is None
    os.unlink(token_path(tmp_path))
    token_path(tmp_path).write_text("0" * (MAX_TOKEN_BYTES + 1))
    assert read_token(tmp_path) is None
