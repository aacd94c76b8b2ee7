"""``port_tree`` (:mod:`hyport_lib.port.tree`): the port of a tree, idempotent and leaving SRC
alone; its refusals, errors of the destination and stop signals; its requirement files;
``port.diff`` (applies to SRC, as difflib writes it) and ``port.json``."""

from __future__ import annotations

import difflib
import errno
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.port import tree as port_tree_module
from hyport_lib.port.tree import (DIFF_NAME, JSON_NAME, PortError, file_diff, port_requirements, port_tree,
                                  unified_lines)
from .test_codemod import PLANTED

REPO = Path(__file__).resolve().parents[2]
CUDA_FILE = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def _plain_functions(count: int) -> str:
    return "".join(f"def helper_{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(count))


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(CUDA_FILE)
    return src


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


def _tree_hashes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def planted_tree(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "modeling.py").write_text(PLANTED)
    (src / "requirements.txt").write_text("torch>=2.1\nflash-attn==2.6.3  # kernels\ntransformers\n")
    (src / "README.md").write_text("not code\n")
    return src


def test_port_leaves_src_untouched_and_is_idempotent(planted_tree, tmp_path):
    before = _tree_hashes(planted_tree)
    first = port_tree(planted_tree, tmp_path / "dst")
    assert _tree_hashes(planted_tree) == before
    assert first.generated == ["pkg/flash_attn_ascend.py"]
    assert sorted(first.files_changed) == ["pkg/modeling.py", "requirements.txt"]
    requirements = (tmp_path / "dst" / "requirements.txt").read_text()
    assert "\nflash-attn" not in requirements and "# flash-attn==2.6.3" in requirements
    assert "torch-npu" in requirements and (tmp_path / "dst" / "README.md").read_text() == "not code\n"
    assert "from .flash_attn_ascend import" in (tmp_path / "dst" / "pkg" / "modeling.py").read_text()

    second = port_tree(tmp_path / "dst", tmp_path / "again")
    assert second.changes == [] and second.generated == [] and second.diff == ""
    ported, again = _tree_hashes(tmp_path / "dst"), _tree_hashes(tmp_path / "again")
    for name in (DIFF_NAME, JSON_NAME):
        ported.pop(name), again.pop(name)
    assert ported == again


def test_unpad_input_serves_what_the_code_unpacks(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("from flash_attn.bert_padding import unpad_input\n"
                              "def f(x, m):\n    a, b, c, d = unpad_input(x, m)\n    return a\n")
    port_tree(src, tmp_path / "dst")
    assert "UNPAD_INPUT_RETURNS = 4\n" in (tmp_path / "dst" / "flash_attn_ascend.py").read_text()


def test_bad_destinations_are_refused_in_one_line(planted_tree, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    with pytest.raises(PortError, match="exists and is not an empty folder"):
        port_tree(planted_tree, busy)
    with pytest.raises(PortError, match="lies inside SRC"):
        port_tree(planted_tree, planted_tree / "out")
    with pytest.raises(PortError, match="does not exist"):
        port_tree(tmp_path / "nope", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_port_diff_applies_to_a_copy_of_src(planted_tree, tmp_path):
    result = port_tree(planted_tree, tmp_path / "dst")
    copy = tmp_path / "copy"
    shutil.copytree(planted_tree, copy)
    subprocess.run(["git", "apply", "--unsafe-paths", str(tmp_path / "dst" / DIFF_NAME)],
                   cwd=copy, check=True, capture_output=True)
    ported = _tree_hashes(tmp_path / "dst")
    for name in (DIFF_NAME, JSON_NAME):
        ported.pop(name)
    assert _tree_hashes(copy) == ported
    assert result.diff.count("+++ b/") == 3


@pytest.mark.slow
def test_cli_writes_the_port_and_refuses_bad_input(planted_tree, tmp_path):
    done = subprocess.run([sys.executable, "-m", "hyport_lib", "port", str(planted_tree),
                           "--out", str(tmp_path / "dst")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "proof: SKIP: not run: " in done.stdout  # the proof runs the code: only with --proof
    assert "pkg/modeling.py:4  flash_attn_import" in done.stdout
    assert "LEFT pkg/modeling.py:23  torch_cuda" in done.stdout
    again = subprocess.run([sys.executable, "-m", "hyport_lib", "port", str(planted_tree),
                            "--out", str(tmp_path / "dst")],
                           capture_output=True, text=True)
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "not an empty folder" in again.stderr


def test_one_import_style_per_folder(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "modeling_x.py").write_text("from .helpers import f\n")
    (src / "helpers.py").write_text("def f(x):\n    return x.cuda()\n")
    port_tree(src, tmp_path / "dst")
    assert "from .flash_attn_ascend import accelerator_device" in (tmp_path / "dst" / "helpers.py").read_text()


def test_build_and_dist_folders_are_code(tmp_path):
    src = tmp_path / "src"
    (src / "dist").mkdir(parents=True)
    (src / "build").mkdir()
    (src / "dist" / "comm.py").write_text('dist.init_process_group(backend="nccl")\n')
    (src / "build" / "blocks.py").write_text("x = 1\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    result = port_tree(src, tmp_path / "dst")
    assert [(c.file, c.kind) for c in result.changes] == [("dist/comm.py", "nccl")]
    assert (tmp_path / "dst" / "build" / "blocks.py").exists() and not (tmp_path / "dst" / ".git").exists()


def test_line_endings_and_encodings_are_kept(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "crlf.py").write_bytes(b"import torch\r\ndef f(x):\r\n    return x.cuda()\r\n")
    (src / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n# auteur: Fran\xe7ois\ndef f(x):\n    return x.cuda()\n")
    (src / "requirements.txt").write_bytes(b"torch\r\nflash-attn==2.6.3\r\n")
    port_tree(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    assert (dst / "crlf.py").read_bytes().count(b"\r\n") == (dst / "crlf.py").read_bytes().count(b"\n")
    assert b"Fran\xe7ois" in (dst / "latin.py").read_bytes()
    assert b"x.to(accelerator_device())" in (dst / "latin.py").read_bytes()
    assert (dst / "requirements.txt").read_bytes().count(b"\r\n") == 3


def test_requirements_continuations_editables_and_tabs():
    text = ("torch==2.1.0\nflash-attn==2.5.8 \\\n    --hash=sha256:0123\n"
            "-e git+https://github.com/Dao-AILab/flash-attention.git@v2.5.8#egg=flash-attn\n"
            "flash_attn==2.6.3\t# tab before comment\n-r other.txt\n")
    new, changes = port_requirements(text, "requirements.txt")
    assert [c.line for c in changes] == [2, 4, 5]
    assert [line for line in new.splitlines() if not line.startswith("#")] == ["torch==2.1.0", "-r other.txt"]


# --------------------------------------------------------------------------- port.diff
def test_the_diff_is_what_difflib_writes_matched_the_patience_way():
    """Lines are matched through unique anchors, hunks written as difflib writes them: on
    texts whose lines are mostly unique, the very diff difflib.unified_diff gives."""
    rng = random.Random(0)
    cases = 0
    for _ in range(40):
        a = [f"line {i} {rng.random():.6f}\n" for i in range(rng.randint(0, 60))]
        b = list(a)
        for _ in range(rng.randint(0, 6)):
            where = rng.randint(0, len(b))
            if b and rng.random() < 0.5:
                b[min(where, len(b) - 1)] = f"changed {rng.random():.6f}\n"
            else:
                b.insert(where, f"new {rng.random():.6f}\n")
        cases += a != b
        assert unified_lines(a, b, "a/m.py", "b/m.py") == list(difflib.unified_diff(a, b, "a/m.py", "b/m.py"))
    assert cases > 30


def test_a_file_diff_marks_a_missing_last_newline_and_a_new_file():
    diff = file_diff("m.py", "x = 1\ny = 2", "x = 1\ny = 3")
    assert diff.endswith("-y = 2\n\\ No newline at end of file\n+y = 3\n\\ No newline at end of file\n")
    assert file_diff("new.py", None, "a\n").startswith("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+a\n")
    assert file_diff("same.py", "a\n", "a\n") == ""
    # a form feed is no line end to patch: one changed line, not two
    assert file_diff("f.py", "a\fb\n", "a\fc\n").count("\n-") == 1


def test_a_long_stretch_without_a_unique_line_is_written_replaced(monkeypatch):
    """Past SMALL_STRETCH lines on both sides with no line found once, the stretch is not
    matched line by line (SequenceMatcher's cost): still a patch that gives the new text."""
    monkeypatch.setattr(port_tree_module, "SMALL_STRETCH", 50)
    a, b = ["x\n", "y\n"] * 100, ["y\n", "x\n"] * 100
    lines = unified_lines(a, b, "a/m.py", "b/m.py")
    assert lines[:3] == ["--- a/m.py\n", "+++ b/m.py\n", "@@ -1,200 +1,200 @@\n"]
    assert [line[1:] for line in lines[3:] if line[0] == "-"] == a
    assert [line[1:] for line in lines[3:] if line[0] == "+"] == b


def test_a_recorded_port_reads_back_with_its_pairs_and_writes_again_the_same():
    """port.json (and stage 02's record) writes the (file, why) pairs as objects; read back as
    PortResult (in stage 02's typed record) they are pairs again, so writing the read record
    gives the same JSON, not each object's key names in place of its values."""
    import json

    from hyport_lib.port.codemod import Change
    from hyport_lib.port.tree import PortResult
    from hyport_lib.stages import read_stage_record
    from hyport_lib.utils.typed_records import to_mapping

    port = PortResult("src", "dst", changes=[Change("m.py", 3, "flash_attn_import", "a", "b")],
                      files_changed=["m.py"], unparsable=[("bad.py", "SyntaxError: x")],
                      not_rewritten=[("big.py", "too large")], skipped=[("data.bin", "not code")],
                      links=[("link.py", "m.py")])
    recorded = json.loads(json.dumps(to_mapping(port)))
    read = read_stage_record("02_attention", {"stage": "02_attention", "verdict": "PASS",
                                              "data": {"port": recorded}}).data.port
    assert (read.unparsable, read.not_rewritten, read.skipped, read.links) == (
        port.unparsable, port.not_rewritten, port.skipped, port.links)
    assert to_mapping(read) == recorded
