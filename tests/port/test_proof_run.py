"""The proof of a port runs the user's code only when asked (``hyport port --proof``, stage
02's ``port_proof``), in a child process: its own process group and time limit, no
bytecode written (SRC stays byte-identical), ``setup.py`` never imported, a model that
exits during import a FAIL that says so, everything it prints or records scrubbed of
secrets (:mod:`hyport_lib.port.proof_run`) and of terminal escapes; a model that prints without
end or leaves a process in a session of its own is stopped with it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from hyport_lib import processes
from hyport_lib.commands import main
from hyport_lib.port import proof_run
from hyport_lib.port.proof_run import STARTING, child_outcome, proof_from_dict
from hyport_lib.proof import port_model
from hyport_lib.proof.port_record import IMPORT_ORIGINAL, model_files
from .test_port_models import OWN_MODEL

SECRET = "s3cr3t-value-of-the-environment-0123456789"
#: A token no variable holds, recognisable by its shape alone.
SHAPED = "ghp_" + "A1b2C3d4E5" * 4


def tree_hash(root: Path) -> str:
    """Every path under ``root`` with its bytes: a file or folder added, removed or changed
    (a ``__pycache__``) changes it."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def model_tree(root: Path, top: str = "", name: str = "modeling_own.py", setup_py: bool = False) -> Path:
    """A folder with the model of one's own (``top`` run first at import) and, with
    ``setup_py``, a ``setup.py`` that leaves a marker beside the folder when it runs."""
    root.mkdir(parents=True)
    (root / name).write_text(OWN_MODEL.replace("import torch\n", "import torch\n" + top, 1))
    if setup_py:
        (root / "setup.py").write_text(
            f"open({str(root.parent / 'SETUP_RAN')!r}, 'w').write('setuptools would build here')\n")
    return root


def test_without_proof_the_model_code_never_runs_and_one_line_says_how(tmp_path, capsys):
    ran = tmp_path / "MODEL_RAN"
    src = model_tree(tmp_path / "src", f"open({str(ran)!r}, 'w').write('x')\nimport sys\nsys.exit(0)\n")
    before = tree_hash(src)
    rc = main(["port", str(src), "--out", str(tmp_path / "dst")])
    out = capsys.readouterr().out
    assert rc == 0 and not ran.exists() and tree_hash(src) == before
    said = [line for line in out.splitlines() if line.startswith("proof:")]
    assert said == ["proof: SKIP: not run: the proof imports and runs your model code (SRC: "
                    "modeling_own.py; DST: modeling_own.py, flash_attn_ascend.py); add --proof to "
                    "run it in a child process"]
    record = json.loads((tmp_path / "dst" / "port.json").read_text())
    assert record["proof"]["verdict"] == "SKIP" and "add --proof" in record["proof"]["error"]


def test_the_no_proof_flag_is_gone(tmp_path):
    src = model_tree(tmp_path / "src")
    with pytest.raises(SystemExit) as exited:  # argparse: an unknown flag
        main(["port", str(src), "--out", str(tmp_path / "dst"), "--no-proof"])
    assert exited.value.code == 2


def test_setup_py_is_never_imported(tmp_path):
    # No modeling*.py: the proof imports every .py file of the tree, and used to run setup.py.
    src = model_tree(tmp_path / "src", name="own_model.py", setup_py=True)
    (src / "own_model.py").write_text("LOADED = True\n")  # no flash_attn to import here
    assert [p.name for p in model_files(src)] == ["own_model.py"]
    modules = port_model.load_tree(src, "original")
    assert [m.__name__.rpartition(".")[2] for m in modules] == ["own_model"]
    assert not (tmp_path / "SETUP_RAN").exists()


def _outcome(tmp_path, *, code, phase=None, result=None, timed_out=False, log=""):
    result_path, phase_path = tmp_path / "proof.json", tmp_path / "phase.txt"
    log_path = tmp_path / "proof.log"
    if phase is not None:
        phase_path.write_text(phase)
    if result is not None:
        result_path.write_text(json.dumps(result))
    log_path.write_text(log)
    return child_outcome(result_path, phase_path, log_path, code, timed_out, 7.0, "--proof-timeout")


def test_a_child_that_ends_without_a_result_is_a_fail_saying_during_what(tmp_path):
    # sys.exit(0) and os._exit(0) in the model code both end the child with status 0, no result
    proof = _outcome(tmp_path, code=0, phase=IMPORT_ORIGINAL)
    assert proof.verdict == "FAIL"
    assert proof.error == ("the model code exited (status 0) during import of the original code "
                           "(SRC), before the proof wrote its result")
    killed = _outcome(tmp_path, code=-9, phase=IMPORT_ORIGINAL,
                      log="Traceback (most recent call last):\nMemoryError: out\n")
    assert "killed by signal SIGKILL" in killed.error and "last error: MemoryError: out" in killed.error
    (tmp_path / "phase.txt").unlink()
    early = _outcome(tmp_path, code=1, log="ModuleNotFoundError: No module named 'torch'\n")
    assert early.error.startswith("the proof's child process ended (exit code 1) before the proof "
                                  "began: ModuleNotFoundError") and STARTING not in early.error
    late = _outcome(tmp_path, code=None, phase=IMPORT_ORIGINAL, timed_out=True)
    assert late.error == ("the proof ran past its time limit of 7 s (--proof-timeout) during import "
                          "of the original code (SRC): its process group was killed")


def test_an_exception_the_proof_did_not_catch_is_a_fail_saying_during_what(tmp_path):
    # the child runner's failed result: what the log's traceback ends with is said
    proof = _outcome(tmp_path, code=1, phase=IMPORT_ORIGINAL,
                     result={"status": "failed", "error_type": "RuntimeError", "error": "boom"},
                     log="Traceback (most recent call last):\nRuntimeError: boom\n")
    assert proof.verdict == "FAIL"
    assert proof.error == ("the model code exited (status 1) during import of the original code "
                           "(SRC), before the proof wrote its result; last error: RuntimeError: boom")


def test_what_the_child_records_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    error = f"RuntimeError: token {SECRET} and {SHAPED} at original modeling_own.py:4"
    proof = _outcome(tmp_path, code=0, phase="x", result={
        "status": "ok", "verdict": "FAIL", "error": error, "notes": [SECRET],
        "cases": [{"name": "dense", "kind": "dense", "verdict": "FAIL", "detail": f"x {SHAPED}"}]})
    text = json.dumps(proof.to_dict())
    assert SECRET not in text and SHAPED not in text
    assert proof.error == "RuntimeError: token [redacted] and [redacted] at original modeling_own.py:4"
    assert proof.cases[0].detail == "x [redacted]"
    died = _outcome(tmp_path, code=1, phase="x", log=f"RuntimeError: {SECRET} {SHAPED}\n")
    assert SECRET not in died.error and SHAPED not in died.error and "[redacted]" in died.error


def test_a_result_that_is_no_proof_record_is_a_fail(tmp_path):
    proof = _outcome(tmp_path, code=0, phase="x", result={"status": "ok", "verdict": "PASS", "planted": 1})
    assert proof.verdict == "FAIL" and "is not a proof record" in proof.error and "planted" in proof.error
    with pytest.raises(ValueError, match="not a proof case"):
        proof_from_dict({"verdict": "PASS", "cases": [{"name": "x", "forged": True}]})


def test_a_result_file_that_cannot_be_read_is_a_fail_saying_so(tmp_path):
    """What lies at the result's place once the child ended is not what the child runner wrote
    (a FIFO or a cut file left by what the model code started): the FAIL says the result is
    unreadable and why, never that the model code exited before the proof wrote one."""
    result_path = tmp_path / "proof.json"
    os.mkfifo(result_path)  # a plain read would block
    planted = _outcome(tmp_path, code=0, phase=IMPORT_ORIGINAL)
    assert planted.verdict == "FAIL"
    assert planted.error == (f"the proof's result is unreadable: unreadable result file {result_path}: "
                             "a FIFO (named pipe), not a regular file")
    result_path.unlink()
    result_path.write_text('{"status": "ok", "verdict": "PA')
    cut = _outcome(tmp_path, code=0, phase=IMPORT_ORIGINAL)
    assert cut.verdict == "FAIL" and cut.error.startswith(
        f"the proof's result is unreadable: unreadable result file {result_path}: Unterminated string")
    assert "before the proof wrote its result" not in planted.error + cut.error


def test_the_proofs_messages_hold_no_nul_no_escape_and_no_secret_in_utf16(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    utf16 = SECRET.encode("utf-16-le").decode("latin-1")
    text = proof_run.scrub(f"RuntimeError: \x1b]0;title\x07\x1b[2Jtoken {utf16} \x07end")
    assert text == "RuntimeError: token [redacted] \\x07end"


def test_a_tree_without_a_model_class_warns(tmp_path):
    from hyport_lib.attention.stage import planted_example
    from hyport_lib.proof.port import prove_port
    from hyport_lib.port.tree import port_tree

    result = port_tree(planted_example(tmp_path / "code"), tmp_path / "dst")
    proof = prove_port(result.src, result.dst)
    assert proof.verdict == "WARN" and proof.error.startswith("no proof: no PreTrainedModel subclass")


# --------------------------------------------------------------------------- in a child
def _port(tmp_path, src, *flags):
    return main(["port", str(src), "--out", str(tmp_path / "dst"), "--proof", *flags])


@pytest.mark.slow
def test_the_proof_passes_in_a_child_leaves_src_byte_identical_and_runs_no_setup_py(
        tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as on a user's shell
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    src = model_tree(tmp_path / "src", name="own_model.py", setup_py=True)
    before = tree_hash(src)
    rc = _port(tmp_path, src)
    out = capsys.readouterr().out
    assert rc == 0 and "proof: PASS  OwnForCausalLM" in out, out[-2000:]
    assert not (tmp_path / "SETUP_RAN").exists()
    assert tree_hash(src) == before
    assert not list((tmp_path / "dst").rglob("__pycache__"))


@pytest.mark.slow
def test_a_model_that_exits_during_import_is_a_fail(tmp_path, capsys):
    src = model_tree(tmp_path / "src", "import sys\nsys.exit(0)\n")
    rc = _port(tmp_path, src)
    out = capsys.readouterr().out
    assert rc == 1
    assert ("proof: FAIL: the model code exited (status 0) during import of the original code "
            "(SRC), before the proof wrote its result") in out


@pytest.mark.slow
def test_an_endless_model_is_stopped_at_the_time_limit(tmp_path, capsys):
    src = model_tree(tmp_path / "src", "while True:\n    pass\n")
    started = time.monotonic()
    rc = _port(tmp_path, src, "--proof-timeout", "3")
    out = capsys.readouterr().out
    assert rc == 1 and time.monotonic() - started < 60
    assert "proof: FAIL: the proof ran past its time limit of 3 s (--proof-timeout) during " in out
    assert "its process group was killed" in out


@pytest.mark.slow
def test_an_exception_holding_secrets_is_scrubbed_from_the_output_and_port_json(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    src = model_tree(tmp_path / "src",
                     f"import os\nraise RuntimeError(os.environ['HF_TOKEN'] + ' ' + {SHAPED!r})\n")
    rc = _port(tmp_path, src)
    out = capsys.readouterr().out
    record = (tmp_path / "dst" / "port.json").read_text()
    assert rc == 1 and "proof: FAIL: RuntimeError: [redacted] [redacted] at original modeling_own.py:" in out
    for text in (out, record):
        assert SECRET not in text and SHAPED not in text
    assert json.loads(record)["proof"]["error"].startswith("RuntimeError: [redacted] [redacted]")


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
