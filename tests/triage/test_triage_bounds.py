"""``hyport triage`` on hostile input: lines built to make a pattern backtrack, a deadline,
a gigabyte without a line end, folders deeper than Python's recursion, links out of the
folder given (a linked folder named in a note), secrets cut by the long-line split, spread
over a key's lines or on the line after a ``\\`` continuation, a key's begin marker without
its key, and terminal escapes and carriage returns in logs and file names."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

from hyport_lib.commands import main
from hyport_lib.triage import find_logs, log_files, recognise, triage, triage_text
from hyport_lib.triage.log_files import MAX_READ_BYTES, read_lines
from hyport_lib.utils.redact import REDACTED, PrivateKeyLines, scrub_secret_shapes

OOM = "RuntimeError: NPU out of memory. Tried to allocate 1 GiB"


def test_catalogue_and_redaction_stay_linear_on_megabyte_lines():
    """Defect 1. No timer: on these 1 MiB lines the unbounded patterns
    (``Ascend/\\S*\\.so: undefined symbol:`` from every ``Ascend/``, ``[HcclSocket][Listen].*``
    from every tag, the URL scheme from every ``.`` and ``-``) take from a quarter of an hour
    to hours each (quadratic: 0.9 s, 0.2 s and 3.5 s at 32 KiB); bounded, milliseconds. A
    regression hangs this test rather than failing on a slow machine."""
    size = 2**20
    ld_path = "/usr/local/Ascend/driver/lib64:" * (size // 31)
    assert recognise(ld_path + " ImportError: libfoo.so: undefined symbol: aclInit") is None
    assert recognise("[HcclSocket][Listen]" * (size // 20) + " and specific port[1] fail") is None
    # The same patterns still find the real failures, also at the end of such a line.
    real = ("ImportError: /usr/local/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: "
            "undefined symbol: _ZN3atb15CreateOperation")
    assert recognise(ld_path + " " + real).key == "version_mismatch"
    socket = ("[HcclSocket][Listen] socket type[0], listen on ip[192.2.2.195] and specific "
              "port[16666] fail.")
    assert recognise("[HcclSocket][Listen]" * (size // 20) + socket).key == "hccl_port_in_use"
    url = "mirror-a.example-b." * (size // 19)
    assert scrub_secret_shapes(f"ERROR {url} https://u:pw-0f-job@{url}") == f"ERROR {url} https://[redacted]@{url}"


def _fake_clock(monkeypatch, step: float) -> None:
    """``time.monotonic`` advancing ``step`` seconds at each call: a deadline reached after a
    known number of reads, whatever the machine's speed."""
    now = [1000.0]

    def tick() -> float:
        now[0] += step
        return now[0]

    monkeypatch.setattr(time, "monotonic", tick)


def test_a_deadline_stops_the_reading_keeps_what_was_found_and_names_what_was_left(tmp_path, monkeypatch):
    """Defect 2: the byte budget bounds bytes, not time."""
    logs = tmp_path / "run"
    logs.mkdir()
    (logs / "a.log").write_text(OOM + "\n" + "step ok\n" * 100, encoding="utf-8")
    for name in ("b.log", "c.log"):
        (logs / name).write_text("E39999: Inner Error!\n", encoding="utf-8")
    _fake_clock(monkeypatch, 1.0)  # one second per line read
    result = triage([logs], max_seconds=10)
    assert [f.key for f in result.findings] == ["npu_out_of_memory"] and result.files_read == ["a.log"]
    assert result.unread == 2 and not result.unrecognised
    stopped, left = result.notes
    assert stopped.startswith("a.log: read up to line ") and "time limit of 10 s for one triage" in stopped
    assert int(stopped.split("line ")[1].split()[0]) < 101
    assert left == "time limit of 10 s reached: 2 log file(s) not read: b.log, c.log"
    monkeypatch.undo()
    assert triage([logs], max_seconds=None).unread == 0
    for bad in (0, -1, True, "5"):
        try:
            triage([logs], max_seconds=bad)
        except ValueError as exc:
            assert str(exc).startswith(f"max_seconds={bad!r}: expected a positive number")
        else:
            raise AssertionError(f"max_seconds={bad!r} accepted")


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
        assert notes == [f"{run}: 1 folder(s) deeper than {log_files.MAX_DEPTH} levels not walked: "
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
    assert result.notes == [f"{run}: 2 link(s) out of the folder not followed: {run / 'elsewhere'}, "
                            f"{run / 'escape.log'}"]
    cann, notes = log_files.cann_logs(run)
    assert run / "escape.log" not in cann and "link(s) out of the folder" in notes[0]


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
    assert result.notes == [f"{run}: 1 link(s) out of the folder not followed: {run / 'logs'}"]


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


def test_a_secret_on_the_line_after_a_continuation_is_redacted_in_a_log(tmp_path):
    log = tmp_path / "deploy.log"
    log.write_text("\n".join(["+ sshpass -p \\", "   'Hunter2pass' ssh root@h", OOM,
                              "+ curl -u \\", "  alice:Hunter7pass https://x", "step ok"]) + "\n",
                   encoding="utf-8")
    shown = json.dumps(triage([log]).to_dict())
    assert "Hunter2pass" not in shown and "Hunter7pass" not in shown and "ssh root@h" in shown


KEY = ["-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6",
       "ffAt0gGjXQ8gZ1g5b6f4h9pQ2Lq7dM3Zx8Jv1Yc2sTnE5rH0wKmB", "-----END RSA PRIVATE KEY-----"]


def test_a_private_key_in_a_log_never_reaches_text_or_json(tmp_path, capsys):
    """Defect 5 (PEM): the key's own lines, kept as context before a finding, say nothing
    that marks them as a key."""
    log = tmp_path / "deploy.log"
    log.write_text("\n".join(["writing key", *KEY, OOM, "after"]) + "\n", encoding="utf-8")
    for argv in (["triage", str(log)], ["triage", "--json", str(log)]):
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert "MIIEow" not in out and "ffAt0g" not in out and "NPU out of memory" in out
    finding = triage([log]).findings[0]
    assert finding.context == ["[redacted]", "[redacted]-----END RSA PRIVATE KEY-----", OOM, "after"]


def test_a_begin_marker_without_its_key_hides_no_later_line(tmp_path, capsys):
    """A ``set -x`` log that greps for the marker opened a "key block" that never closed:
    every later line was redacted, the OOM unseen, "no error lines", exit 0."""
    log = tmp_path / "run.log"
    log.write_text("\n".join(["+ grep -q -- '-----BEGIN PRIVATE KEY-----' /etc/ssl/key.pem", "step 1 ok",
                              "Traceback (most recent call last):", OOM]) + "\n", encoding="utf-8")
    assert main(["triage", str(log)]) == 1
    assert "NPU out of memory" in capsys.readouterr().out
    assert [f.key for f in triage([log]).findings] == ["npu_out_of_memory"]
    # The same in one text, and a key cut short (no end marker) is still redacted.
    text = scrub_secret_shapes("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n" + OOM)
    assert text == "-----BEGIN PRIVATE KEY-----[redacted]\n[redacted]\n[redacted]\n" + OOM
    lines = PrivateKeyLines()
    shown = [lines.scrub(line) for line in ["-----BEGIN EC PRIVATE KEY-----", "Proc-Type: 4,ENCRYPTED", "",
                                             "[rank0]: MHcCAQEEIDemoKeyBody0123456789", "step 2 ok"]]
    assert shown == ["-----BEGIN EC PRIVATE KEY-----[redacted]", REDACTED, REDACTED, REDACTED, "step 2 ok"]


def test_terminal_escapes_in_logs_and_file_names_are_never_printed(tmp_path, capsys):
    """Defect 6: a log's escape sequences (colours, a title, a screen clear) and control
    characters reached the terminal raw, in the text and in the JSON."""
    log = tmp_path / "rank\x1b[2J0.log"
    log.write_text("\x1b]0;owned\x07\x1b[31m" + OOM + "\x1b[0m\x00\x08 tab\there\n"
                   "\x1b[1;31mE39999: Inner Error!\x1b[0m\x1b\n", encoding="utf-8")
    result = triage([tmp_path])
    finding = result.findings[0]
    assert finding.text == OOM + "\\x00\\x08 tab\there" and finding.file == "rank0.log"
    assert result.unrecognised == []
    for argv in (["triage", str(tmp_path)], ["triage", "--json", str(tmp_path)]):
        main(argv)
        out = capsys.readouterr().out
        assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in out), repr(out)
    assert all("\x1b" not in line for line in triage_text(result))


def test_a_carriage_return_in_a_file_name_is_shown_escaped(tmp_path, capsys):
    """A ``\\r`` in a name moved the cursor back: ``b\\rFAKE.log`` printed as ``FAKE.log``."""
    (tmp_path / "b\rFAKE.log").write_text("E39999: Inner Error!\n", encoding="utf-8")
    result = triage([tmp_path])
    assert result.files_read == ["b\\x0dFAKE.log"] and result.unrecognised[0].file == "b\\x0dFAKE.log"
    for argv in (["triage", str(tmp_path)], ["triage", "--json", str(tmp_path)]):
        main(argv)
        out = capsys.readouterr().out
        assert "\r" not in out and "\\r" not in out.replace("\\\\r", ""), repr(out)
    assert all("\r" not in line for line in triage_text(result))
