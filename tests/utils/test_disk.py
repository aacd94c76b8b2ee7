"""hyport_lib.utils.disk: which failed save is this folder's disk being full."""

from __future__ import annotations

from hyport_lib.utils.disk import disk_full_error


def test_no_space_on_another_disk_is_not_this_folders_disk_being_full(tmp_path):
    # a full /dev/shm (or another disk) is not this folder's disk being full
    assert disk_full_error(RuntimeError("No space left on device (28)"), tmp_path, 10) is None
