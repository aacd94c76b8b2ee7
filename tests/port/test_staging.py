"""The staged copy of a port (:mod:`hyport_lib.port.staging`): what it reads of SRC (links,
special files, sizes, encodings), and the staging folders of killed ports it removes."""

from __future__ import annotations

import json
import os

from hyport_lib.port import staging
from hyport_lib.port.tree import JSON_NAME, port_tree
from .test_tree import CUDA_FILE, _plain_functions, _src


def test_a_code_file_over_the_bound_is_copied_as_it_was_and_named(tmp_path, monkeypatch):
    src = _src(tmp_path)
    big = CUDA_FILE + _plain_functions(100)
    (src / "big.py").write_text(big)
    monkeypatch.setattr(staging, "MAX_REWRITE_BYTES", len(big) - 1)
    result = port_tree(src, tmp_path / "dst")
    assert result.not_rewritten == [("big.py", f"larger than {(len(big) - 1) >> 20} MiB "
                                                "(copied as it was)")]
    assert (tmp_path / "dst" / "big.py").read_text() == big
    assert "accelerator_device()" in (tmp_path / "dst" / "model.py").read_text()
    record = json.loads((tmp_path / "dst" / JSON_NAME).read_text())
    assert record["not_rewritten"][0]["file"] == "big.py"


def test_links_out_loops_and_fifos_are_skipped_and_named_links_inside_kept(tmp_path):
    src = _src(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    (src / "requirements.txt").symlink_to(secret)
    (src / "outside").symlink_to(tmp_path)
    (src / "loop_a").symlink_to("loop_b")
    (src / "loop_b").symlink_to("loop_a")
    os.mkfifo(src / "pipe")
    (src / "pkg").mkdir()
    (src / "pkg" / "same_model.py").symlink_to(src / "model.py")  # absolute, inside SRC
    result = port_tree(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    reasons = dict(result.skipped)
    assert sorted(reasons) == ["loop_a", "loop_b", "outside", "pipe", "requirements.txt"]
    assert reasons["requirements.txt"].startswith("a link out of SRC")
    assert "link loop" in reasons["loop_a"] and "FIFO" in reasons["pipe"]
    assert not os.path.lexists(dst / "requirements.txt") and not os.path.lexists(dst / "outside")
    # a link inside SRC stays a link, relative, and serves the ported file
    assert os.readlink(dst / "pkg" / "same_model.py") == "../model.py"
    assert "accelerator_device()" in (dst / "pkg" / "same_model.py").read_text()
    record = json.loads((dst / JSON_NAME).read_text())
    assert {"path": "pipe", "reason": reasons["pipe"]} in record["skipped"]
    assert record["links"] == [{"path": "pkg/same_model.py", "target": "../model.py"}]


def test_a_non_utf8_file_is_named_and_kept_the_rest_ported(tmp_path):
    src = _src(tmp_path)
    (src / "latin.py").write_bytes(b"x = 'caf\xe9'\ny = x.cuda()\n")
    result = port_tree(src, tmp_path / "dst")
    assert result.not_rewritten == [("latin.py", "not valid UTF-8 and no PEP 263 coding line "
                                                 "(copied as it was)")]
    assert (tmp_path / "dst" / "latin.py").read_bytes() == b"x = 'caf\xe9'\ny = x.cuda()\n"
    assert result.files_changed == ["model.py"]


def test_staging_left_by_a_killed_port_is_removed_only_when_its_owner_is_gone(tmp_path):
    src = _src(tmp_path)
    gone = 4194305  # above Linux's largest PID (pid_max 2**22): no such process
    dead = tmp_path / f".dst.hyport-staging-{gone}-1-abc123"
    alive = tmp_path / f".other.hyport-staging-{os.getpid()}-0-def456"
    foreign = tmp_path / f".dst.{gone}-not-ours"
    for folder in (dead, alive, foreign):
        folder.mkdir()
        (folder / "big.bin").write_bytes(b"\0" * 10)
    result = port_tree(src, tmp_path / "dst")
    assert result.removed_staging == [str(dead)]
    assert not dead.exists() and alive.exists() and foreign.exists()


def test_staging_of_another_host_is_kept_this_hosts_and_old_names_go(tmp_path):
    src = _src(tmp_path)
    gone = 4194305  # above Linux's largest PID: no such process here
    other = "0" * 8 if staging.host_id() != "0" * 8 else "1" * 8
    foreign = tmp_path / f".dst.hyport-staging-{other}-{gone}-1-abc123"
    mine = tmp_path / f".dst.hyport-staging-{staging.host_id()}-{gone}-1-abc123"
    old = tmp_path / f".dst.hyport-staging-{gone}-1-def456"
    for folder in (foreign, mine, old):
        folder.mkdir()
    result = port_tree(src, tmp_path / "dst")
    assert sorted(result.removed_staging) == sorted([str(mine), str(old)])
    assert foreign.exists()
