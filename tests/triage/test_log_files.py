"""The log files a triage reads: found under run folders (model folders, pipes, links out,
folders deeper than Python's recursion), CANN's folder (its own per worker, none without a
home), the byte budget, and lines as ``grep -n`` numbers them, a long line cut without
leaving a piece of a token, in bounded memory."""

from __future__ import annotations

import json
import os
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from hyport_lib.triage import cann_log_dir, find_logs, log_files, own_cann_log_env, triage
from hyport_lib.triage.log_files import MAX_READ_BYTES, read_lines
from hyport_lib.triage.scan import MAX_LINE_CHARS

from .test_catalogue import _cli


LOGS = Path(__file__).parents[1] / "data" / "npu_logs"


def _rank_log(run: Path, rank: int) -> Path:
    return run / "train" / "demo" / "logs" / "ranks" / "abc" / "attempt_0" / str(rank) / "stderr.log"


def test_run_folder_discovery_finds_the_logs_and_skips_model_folders(tmp_path):
    run = tmp_path / "run1"
    wanted = [run / "logs" / "04_train.log", run / "train" / "demo" / "logs" / "torchrun.log",
              _rank_log(run, 0), _rank_log(run, 1).with_name("stdout.log"),
              run / "inference_logs" / "20261201-1" / "card0.log",
              run / "train" / "demo" / "logs" / "ranks" / "abc" / "attempt_0" / "1" / "stderr"]
    ignored = [run / "results" / "04_train.json", run / "notebooks" / "04_train.ipynb",
               run / "train" / "demo" / "checkpoint-10" / "vocab.txt",
               run / "train" / "demo" / "final" / "merges.txt",
               run / "logs" / "__pycache__" / "x.log"]
    for path in wanted + ignored:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("Error in vocabulary\n", encoding="utf-8")
    (run / "train" / "demo" / "final" / "config.json").write_text("{}", encoding="utf-8")
    (run / "train" / "demo" / "final" / "model.safetensors").write_bytes(b"")
    found, notes = find_logs(run)
    assert sorted(found) == sorted(wanted) and notes == []
    assert find_logs(wanted[0]) == ([wanted[0]], [])
    with pytest.raises(FileNotFoundError, match="nowhere: no such file or folder"):
        find_logs(tmp_path / "nowhere")


def test_a_very_long_line_keeps_its_end_and_line_numbers_stay_right(tmp_path):
    log = tmp_path / "long.log"
    log.write_text("x" * 200_000 + " NPU out of memory. Tried to allocate 1 GiB\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n", encoding="utf-8")
    finding = triage([log]).findings[0]
    # The end of an overlong line is read (an error glued to a progress bar ends its line),
    # and the kept text is cut around what matched.
    assert finding.line == 1 and finding.places[0].line == 1 and finding.occurrences == 2
    assert "NPU out of memory. Tried to allocate 1 GiB" in finding.text
    assert len(finding.text) <= MAX_LINE_CHARS and len(finding.context[0]) <= MAX_LINE_CHARS
    odd = tmp_path / "odd.log"
    odd.write_text("x" * 200_000 + "\n" + "y" * 70_000 + "\nE39999: Inner Error!\n", encoding="utf-8")
    assert triage([odd]).unrecognised[0].lines == [[3, "E39999: Inner Error!"]]


def _cann_folder(tmp_path: Path) -> tuple[Path, float]:
    """A CANN log folder with an old plog (an earlier job's) and a new one (this run's)."""
    folder = tmp_path / "ascend" / "log"
    old = folder / "debug" / "plog" / "plog-100_20251201000000000.log"
    new = folder / "debug" / "plog" / "plog-200_20251202000000000.log"
    device = folder / "debug" / "device-0" / "device-200_20251202000000000.log"
    for path, source in ((old, "device_in_use.llama-factory-3839.log"),
                         (new, "hccl_connect_timeout.vllm-ascend-1955.log"),
                         (device, "aicore_exception.torch_npu-66.log")):
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(LOGS / source, path)
    start = time.time() - 600
    os.utime(old, (start - 3600, start - 3600))
    return folder, start


# Each test below reproduces a finding of the review (/tmp/review_a) and failed before its fix.
def test_a_training_folder_with_saved_weights_still_yields_its_logs(tmp_path, capsys):
    """H1: training saves its weights into the folder whose logs/ holds the rank logs."""
    train = tmp_path / "run" / "train" / "qwen-sft"
    rank1 = train / "logs" / "ranks" / "none_ab12" / "attempt_0" / "1" / "stderr.log"
    rank1.parent.mkdir(parents=True)
    rank1.write_text("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n", encoding="utf-8")
    (train / "logs" / "node0.log").write_text("[default1]:RuntimeError: NPU out of memory. "
                                              "Tried to allocate 2.00 GiB\n", encoding="utf-8")
    (train / "config.json").write_text("{}", encoding="utf-8")
    (train / "model.safetensors").write_bytes(b"\0" * 16)
    (train / "merges.txt").write_text("Ġ Error\n", encoding="utf-8")  # a vocabulary, not a log
    (train / "running_log.txt").write_text("step 1 loss 2.3\n", encoding="utf-8")
    (train / "checkpoint-10").mkdir()
    (train / "checkpoint-10" / "trainer_state.txt").write_text("ERROR x\n", encoding="utf-8")
    found, _ = find_logs(tmp_path / "run")
    assert sorted(p.relative_to(train).as_posix() for p in found) == [
        "logs/node0.log", "logs/ranks/none_ab12/attempt_0/1/stderr.log", "running_log.txt"]
    assert find_logs(train)[0] == found  # the model folder given itself: the same files
    code, text, _ = _cli(capsys, tmp_path / "run")
    assert code == 1 and "device out of memory (train/qwen-sft/logs/node0.log:1)" in text


def test_line_numbers_are_those_of_grep_with_progress_bars_and_crlf(tmp_path):
    """M3: a bare carriage return (tqdm) does not end a line."""
    oom = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    bar = "".join(f"\r  {i}%|###| {i}/100" for i in range(0, 101, 10))
    tqdm = tmp_path / "tqdm.log"
    tqdm.write_bytes(f"start\n{bar}\n{oom}\n".encode())
    finding = triage([tqdm]).findings[0]
    assert finding.line == 3 and finding.context[1] == "  100%|###| 100/100"  # what a terminal shows
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(f"a\r\nb\r\n{oom}\r\n".encode())
    assert triage([crlf]).findings[0].line == 3 and triage([crlf]).findings[0].text == oom
    glued = tmp_path / "glued.log"  # an exception printed after an unfinished progress bar
    glued.write_bytes(f"start\n{bar}\rTraceback (most recent call last):\nKeyError: 'x'\n".encode())
    assert triage([glued]).unrecognised[0].lines == [[2, "Traceback (most recent call last):"],
                                                     [3, "KeyError: 'x'"]]


def test_no_home_folder_means_no_cann_folder_not_a_crash(tmp_path, capsys, monkeypatch):
    """M4a: a container user with no HOME and no passwd entry."""
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("ASCEND_PROCESS_LOG_PATH", raising=False)
    assert cann_log_dir({}) is None
    assert cann_log_dir({"ASCEND_PROCESS_LOG_PATH": str(tmp_path)}) == tmp_path
    # CANN's order: the log variable, then the work folder's log/, then the home folder
    work = {"ASCEND_WORK_PATH": "/work/ascend", "HOME": "/home/u"}
    assert cann_log_dir(work) == Path("/work/ascend/log")
    assert cann_log_dir({**work, "ASCEND_PROCESS_LOG_PATH": str(tmp_path)}) == tmp_path
    log = tmp_path / "a.log"
    log.write_text("RuntimeError: NPU out of memory. Tried to allocate 1 GiB\n", encoding="utf-8")
    code, text, _ = _cli(capsys, log, "--all")
    assert code == 1 and "CANN logs not read" in text and "--cann-logs" in text


def _fifo(path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(path)
    return path


def _within(seconds: float, call):
    """``call()``'s result, or a failure when it blocks longer than ``seconds``."""
    import threading

    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("result", call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"blocked for more than {seconds} s"
    return box["result"]


def test_a_pipe_named_like_a_log_is_skipped_not_waited_on(tmp_path):
    """M4b: a FIFO named *.log in the CANN folder (or the run folder, or given) blocks no one."""
    folder, start = _cann_folder(tmp_path)
    _fifo(folder / "debug" / "plog" / "plog-300_20251202000000000.log")
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.log").write_text("RuntimeError: NPU out of memory. Tried to allocate 1 GiB\n", encoding="utf-8")
    _fifo(run / "fifo.log")
    result = _within(10, lambda: triage([run], cann_log_dir=folder, since=start))
    assert "npu_out_of_memory" in {f.key for f in result.findings}
    assert any("plog-300" in n and "not a regular file" in n for n in result.notes)
    given = _within(10, lambda: triage([_fifo(tmp_path / "given.log")]))
    assert given.files_read == [] and "not a regular file" in given.notes[0]


def test_a_byte_budget_bounds_the_reading_and_names_what_was_left(tmp_path):
    """L8: hundreds of large plogs must not take minutes; newest CANN logs first."""
    folder = tmp_path / "cann"
    (folder / "debug" / "plog").mkdir(parents=True)
    filler = "[INFO] HCCL(1,python): entry-HcclAllReduce tag[AllReduce_1] count[4096]\n" * 200
    now = time.time()
    for age, name, source in ((300, "plog-1_1.log", "device_in_use.llama-factory-3839.log"),
                              (200, "plog-2_2.log", "hccl_connect_timeout.vllm-ascend-486.log"),
                              (100, "plog-3_3.log", "aicore_exception.torch_npu-66.log")):
        path = folder / "debug" / "plog" / name
        path.write_text(filler + (LOGS / source).read_text(encoding="utf-8"), encoding="utf-8")
        os.utime(path, (now - age, now - age))
    own = tmp_path / "run" / "rank0.log"
    own.parent.mkdir()
    own.write_text(filler * 3 + "RuntimeError: NPU out of memory. Tried to allocate 1 GiB\n", encoding="utf-8")
    size = lambda p: p.stat().st_size  # noqa: E731
    plogs = sorted((folder / "debug" / "plog").iterdir())
    budget = size(own) + size(plogs[2]) + size(plogs[1]) // 2
    result = triage([own.parent], cann_log_dir=folder, max_bytes=budget)
    assert {f.key for f in result.findings} == {"npu_out_of_memory", "aicore_exception",
                                                 "hccl_connect_timeout"}  # the newest, whole or tail
    assert not any("plog-1_" in f for f in result.files_read) and result.unread == 1
    assert any("plog-1_1.log" in n and "not read" in n for n in result.notes)
    assert any("plog-2_2.log" in n and "only its last" in n for n in result.notes)
    # A log larger than the budget is read from its end, with its real line numbers.
    tail = triage([own], max_bytes=1000)
    assert tail.findings[0].line == 601 and "only its last" in tail.notes[0]
    with pytest.raises(ValueError, match="max_bytes=0"):
        triage([own], max_bytes=0)


OOM = "RuntimeError: NPU out of memory. Tried to allocate 1 GiB"


def test_a_sparse_log_without_line_ends_is_read_in_bounded_memory(tmp_path):
    """Defect 3: the line the byte budget's start fell in was skipped with one ``readline``,
    holding all of it (a 1 GiB sparse log took 1055 MiB). Measured with tracemalloc, which
    counts the bytes objects the reader makes: the old reader's peak here is the 48 MiB line."""
    sparse = tmp_path / "sparse.log"
    with sparse.open("wb") as handle:
        handle.truncate(64 * 2**20)
    with sparse.open("ab") as handle:
        handle.write(b"\n" + OOM.encode() + b"\n")
    tracemalloc.start()
    try:
        result = triage([sparse], max_bytes=16 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Blocks of 1 MiB to count and skip, two reads of a line: about 2 MiB.
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert result.findings[0].line == 2 and "only its last 16.0 MiB" in result.notes[0]


def _deep(folder: Path, depth: int) -> Path:
    """``folder/d/d/...`` ``depth`` levels deep, made with relative paths (a full path to the
    bottom would be longer than the system's limit); the bottom folder."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        return Path(os.getcwd())
    finally:
        os.chdir(here)


def _remove_deep(folder: Path) -> None:
    """Remove what :func:`_deep` made, from the bottom up (``shutil.rmtree`` recurses)."""
    bottom = folder
    while (bottom / "d").is_dir():
        bottom = bottom / "d"
    for item in bottom.iterdir():
        item.unlink()
    while bottom != folder:
        bottom.rmdir()
        bottom = bottom.parent


def test_a_folder_deeper_than_pythons_recursion_is_walked_to_a_bound_with_a_note(tmp_path):
    """Defect 4: ``os.walk`` recursed ("maximum recursion depth exceeded" at about 1000 levels)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.log").write_text(OOM + "\n", encoding="utf-8")
    try:
        (_deep(run, 1100) / "deep.log").write_text("E39999: Inner Error!\n", encoding="utf-8")
        found, notes = find_logs(run)
        assert found == [run / "rank0.log"]
        assert notes == [f"{run}: 1 folder deeper than {log_files.MAX_DEPTH} levels not walked: "
                         f"{run / '/'.join(['d'] * (log_files.MAX_DEPTH + 1))}"]
        shallow, _ = log_files.walk_files(run, lambda path, _: path.suffix == ".log", max_depth=2000)
        assert len(shallow) == 2  # within the bound, the walk reaches the bottom
    finally:
        _remove_deep(run)


def test_a_link_out_of_the_folder_given_is_not_followed(tmp_path):
    """Defect 4: a ``*.log`` link to a file outside the run folder was read."""
    outside = tmp_path / "private" / "notes.txt"
    outside.parent.mkdir()
    outside.write_text("E39999: private line\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.log").write_text(OOM + "\n", encoding="utf-8")
    (run / "escape.log").symlink_to(outside)
    (run / "old").mkdir()
    (run / "old" / "rank1.txt").write_text("step 1 ok\n", encoding="utf-8")
    (run / "latest.log").symlink_to(run / "old" / "rank1.txt")  # a link inside is read
    (run / "elsewhere").symlink_to(outside.parent, target_is_directory=True)
    result = triage([run])
    assert result.files_read == ["old/rank1.txt", "rank0.log"] and not result.unrecognised
    assert result.notes == [f"{run}: 2 links out of the folder not followed: {run / 'elsewhere'}, "
                            f"{run / 'escape.log'}"]
    cann, notes = log_files.cann_logs(run)
    assert run / "escape.log" not in cann and "links out of the folder" in notes[0]


def test_a_linked_folder_out_of_the_run_is_named_in_a_note(tmp_path):
    """``run/logs -> /scratch/...`` was skipped without a word: "no error lines" of a run
    whose logs were never read."""
    outside = tmp_path / "scratch" / "logs"
    outside.mkdir(parents=True)
    (outside / "rank0.log").write_text(OOM + "\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "stage.log").write_text("step ok\n", encoding="utf-8")
    (run / "logs").symlink_to(outside, target_is_directory=True)
    (run / "old").mkdir()
    (run / "latest").symlink_to(run / "old", target_is_directory=True)  # inside: walked anyway
    result = triage([run])
    assert result.files_read == ["stage.log"]
    assert result.notes == [f"{run}: 1 link out of the folder not followed: {run / 'logs'}"]


def test_a_token_cut_by_the_long_line_split_shows_no_piece(tmp_path):
    """Defect 5 (the split): a token through the end of a long line's kept start, or through
    the start of its kept end, lost its shape and showed in part (``hf_A1b2C3d4A1``)."""
    head_token = "hf_" + "A1b2C3d4" * 5
    tail_token = "ghp_" + "Z9y8X7w6" * 5
    start = "w " * ((MAX_READ_BYTES - 20) // 2)  # the head token crosses byte 64 KiB
    middle = "m " * 60_000
    after = f"{tail_token} {OOM} and more"
    line = start + head_token + " " + middle + after
    # The kept end is the last 64 KiB of the line, its newline included: make it begin
    # inside the tail token.
    line += " " + "e " * ((MAX_READ_BYTES - 1 - len(after) - 1 + 10) // 2)
    log = tmp_path / "long.log"
    log.write_text(line + "\n", encoding="utf-8")
    text = next(read_lines(log))[1]
    shown = json.dumps(triage([log]).to_dict())
    for token in (head_token, tail_token):
        pieces = {token[i:i + 5] for i in range(len(token) - 4)}
        assert not any(piece in text for piece in pieces), token
        assert not any(piece in shown for piece in pieces), token
    assert "NPU out of memory" in shown and " … " in text


def test_a_quoted_secret_cut_by_the_long_line_split_shows_no_word(tmp_path):
    pad = ("x " * MAX_READ_BYTES)[:MAX_READ_BYTES - 39]  # the cut falls inside "horse"
    line = pad + 'ERROR login failed password="correct horse battery staple" for svc' + " y" * 40_000
    log = tmp_path / "cut.log"
    log.write_text(line + "\n", encoding="utf-8")
    shown = json.dumps(triage([log]).to_dict())
    assert "ERROR login failed" in shown
    assert not any(word in shown for word in ("correct", "horse", "battery", "staple"))


def test_a_relative_user_cann_folder_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert own_cann_log_env(tmp_path / "x", {"ASCEND_PROCESS_LOG_PATH": "plog"}) == {
        "ASCEND_PROCESS_LOG_PATH": str(tmp_path / "plog")}


def test_own_cann_log_folder_unless_the_user_chose_one(tmp_path):
    assert own_cann_log_env(tmp_path, {}) == {"ASCEND_PROCESS_LOG_PATH": str(tmp_path)}
    assert own_cann_log_env(tmp_path, {"ASCEND_PROCESS_LOG_PATH": "/var/log/mine"}) == {}
