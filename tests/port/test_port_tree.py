"""``hyport port``'s tree: what it reads of SRC (links, special files, sizes, encodings),
how it writes DST (staging, errors of the destination), and its stop signals."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.port import codemod, staging, tree as port_tree_module
from hyport_lib.port.tree import DIFF_NAME, JSON_NAME, PortError, port_tree

REPO = Path(__file__).resolve().parents[2]
CUDA_FILE = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def _plain_functions(count: int) -> str:
    return "".join(f"def helper_{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(count))


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(CUDA_FILE)
    return src


def test_only_segments_with_cuda_words_go_through_libcst(monkeypatch):
    parsed = []
    real_parse = codemod.cst.parse_module
    monkeypatch.setattr(codemod.cst, "parse_module", lambda text: parsed.append(text) or real_parse(text))
    source = CUDA_FILE + _plain_functions(200) + "def g(y):\n    return y.cuda()\n"
    result = codemod.port_python(source, "m.py", relative=False)
    assert [c.line for c in result.changes] == [5, 5 + 4 * 200 + 2]
    assert result.code.count("accelerator_device()") == 2
    # the two functions that change and the header (for the helper's import), not the 200
    assert sum(len(text) for text in parsed) < len(source) / 10


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


def test_a_destination_under_a_file_or_unwritable_is_one_port_error(tmp_path, monkeypatch):
    src = _src(tmp_path)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(PortError, match="lies under .*notes.txt.*which is not a folder"):
        port_tree(src, tmp_path / "notes.txt" / "out")

    def read_only(target):
        raise OSError(errno.EROFS, "Read-only file system", str(target))

    monkeypatch.setattr(port_tree_module, "make_staging", read_only)
    with pytest.raises(PortError, match="cannot write --out .*dst.*: Read-only file system"):
        port_tree(src, tmp_path / "dst")


def test_a_full_disk_names_the_destination_and_leaves_no_staging(tmp_path, monkeypatch):
    src = _src(tmp_path)
    (src / "weights.bin").write_bytes(b"\0" * 1000)

    def full(path, folder, destination):  # as shutil reports it: the source file named
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(port_tree_module, "copy_file", full)
    with pytest.raises(PortError) as caught:
        port_tree(src, tmp_path / "dst")
    message = str(caught.value)
    assert str(tmp_path / "dst" / "weights.bin") in message and "No space left" in message
    assert str(src) not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_non_utf8_file_is_named_and_kept_the_rest_ported(tmp_path):
    src = _src(tmp_path)
    (src / "latin.py").write_bytes(b"x = 'caf\xe9'\ny = x.cuda()\n")
    result = port_tree(src, tmp_path / "dst")
    assert result.not_rewritten == [("latin.py", "not valid UTF-8 and no PEP 263 coding line "
                                                 "(copied as it was)")]
    assert (tmp_path / "dst" / "latin.py").read_bytes() == b"x = 'caf\xe9'\ny = x.cuda()\n"
    assert result.files_changed == ["model.py"]


def test_the_diff_of_a_file_with_a_bom_carries_it_on_line_one(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "bom.py").write_bytes(b"\xef\xbb\xbfimport torch\nx = torch.zeros(1).cuda()\n")
    port_tree(src, tmp_path / "dst")
    diff = (tmp_path / "dst" / DIFF_NAME).read_bytes()
    bom_part = diff[diff.index(b"--- a/bom.py"):]
    assert bom_part.startswith(b"--- a/bom.py\n+++ b/bom.py\n@@ ")
    assert b"\n \xef\xbb\xbfimport torch\n" in bom_part  # line 1, as context, BOM and all
    assert (tmp_path / "dst" / "bom.py").read_bytes().startswith(b"\xef\xbb\xbfimport torch\n")


def test_a_fifo_as_src_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(PortError, match="is a FIFO"):
        port_tree(tmp_path / "pipe", tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_a_usage_error_names_the_command_once(tmp_path, capsys):
    assert main(["port", str(tmp_path / "nothere"), "--out", str(tmp_path / "dst")]) == 2
    err = capsys.readouterr().err
    assert err.count("hyport port:") == 1 and "does not exist" in err


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


def test_a_stop_while_writing_removes_the_staging_folder(tmp_path, monkeypatch):
    src = _src(tmp_path)
    (src / "data.bin").write_bytes(b"\0")

    def stopped(path, folder, destination):
        raise KeyboardInterrupt

    monkeypatch.setattr(port_tree_module, "copy_file", stopped)
    with pytest.raises(KeyboardInterrupt):
        port_tree(src, tmp_path / "dst")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def _catches_sigterm(status: Path) -> bool:
    lines = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    return bool(int(lines["SigCgt"], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow
def test_sigterm_during_the_rewrite_of_a_big_file_ends_the_port_at_once(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    blocks = [CUDA_FILE] + [f"def attend_{i}(q):\n    return q.cuda()\n\n\n" + _plain_functions(20)
                            for i in range(600)]
    (src / "model.py").write_text("".join(blocks))  # about 1.4 MB
    process = subprocess.Popen([sys.executable, "-c", "from hyport_lib.commands import cli; cli()",
                                "port", str(src), "--out", str(tmp_path / "dst")],
                               cwd=REPO, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{process.pid}/status")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _catches_sigterm(status):
        time.sleep(0.05)  # until the command runs (its imports done, its handlers set)
    time.sleep(1.0)  # into the parse and the rewrite
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    # Not a performance bound: before the fix the signal waited for the whole rewrite (minutes
    # for this file); a loaded 2-core CI box took 1.7 s to stop, so the bound is coarse.
    assert time.monotonic() - sent < 15, err
    assert process.returncode == 130 and "stopped by SIGTERM" in err, (process.returncode, err[-3000:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
