"""Faults found in review of ``hyport port``: a ``.cuda()`` whose call or dot carries
layout, the proof's messages (NULs, terminal escapes), a model that prints without end or
leaves a process in a session of its own, staging folders of another host."""

from __future__ import annotations

import ast
import json
import os
import signal
import time
from pathlib import Path

import pytest

from hyport_lib import processes
from hyport_lib.commands import main
from hyport_lib.port import proof_run, staging
from hyport_lib.port.codemod import port_python
from hyport_lib.port.tree import port_tree
from test_port_proof_consent import model_tree

SECRET = "s3cr3t-value-of-the-environment-0123456789"


@pytest.mark.parametrize("code", [
    "y = 1 .cuda()\n",
    "import torch\n\ndef f(m):\n    return (m\n            .cuda(0))\n",
    "import torch\n\ndef f(m):\n    y = (torch.zeros(3)  # kept\n         .cuda())\n    return y\n",
])
def test_a_cuda_call_keeps_its_parentheses_and_the_space_before_its_dot(code):
    ported = port_python(code, "m.py", relative=False).code
    ast.parse(ported)
    assert ".to(accelerator_device(" in ported and ("#" not in code or "# kept" in ported)


def test_the_proofs_messages_hold_no_nul_no_escape_and_no_secret_in_utf16(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    utf16 = SECRET.encode("utf-16-le").decode("latin-1")
    text = proof_run.scrub(f"RuntimeError: \x1b]0;title\x07\x1b[2Jtoken {utf16} \x07end")
    assert text == "RuntimeError: token [redacted] \\x07end"


def test_staging_of_another_host_is_kept_this_hosts_and_old_names_go(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text("import torch\n\n\ndef f(x):\n    return x.cuda()\n")
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


def _port(tmp_path, src, *flags):
    return main(["port", str(src), "--out", str(tmp_path / "dst"), "--proof", *flags])


@pytest.mark.slow
def test_a_model_printing_without_end_is_stopped_and_its_log_not_read_whole(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(proof_run, "MAX_LOG_BYTES", 4 << 20)
    read = []
    real = processes.scrub_log  # scrubbing reads the log: by then only its tail is left
    monkeypatch.setattr(processes, "scrub_log",
                        lambda path, *a: read.append(os.path.getsize(path)) or real(path, *a))
    src = model_tree(tmp_path / "src", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    rc = _port(tmp_path, src, "--proof-timeout", "300")
    out = capsys.readouterr().out
    assert rc == 1 and "proof: FAIL: the proof printed more than 4 MiB during " in out, out[-500:]
    assert read and read[0] <= proof_run.LOG_TAIL_BYTES


@pytest.mark.slow
def test_a_process_the_model_starts_in_its_own_session_does_not_outlive_the_proof(
        tmp_path, capsys):
    pid_file = tmp_path / "escaped.pid"
    top = ("import os, signal, time\n"
           "if os.fork() == 0:\n"
           "    os.setsid()\n"
           "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
           "    while True:\n"
           "        time.sleep(1)\n"
           f"while not os.path.exists({str(pid_file)!r}):\n"
           "    time.sleep(0.05)\n"
           "raise RuntimeError('done')\n")
    src = model_tree(tmp_path / "src", top)
    _port(tmp_path, src)
    capsys.readouterr()
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
        alive = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except ProcessLookupError:
        alive = False
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "a process started by the model code outlived the proof"
