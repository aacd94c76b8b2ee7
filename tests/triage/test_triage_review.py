"""Review of the triage hardening (issue 29): a stray private-key marker that hid every
later line, secrets the landed shapes still showed (a quoted value cut short or given to a
flag, a value on the next line after ``\\``, ``SSHPASS`` / ``DB_PASS``), carriage returns in
file names, and a linked folder out of the run dropped without a note."""

from __future__ import annotations

import json

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import triage, triage_text
from hyport_lib.triage.reading import MAX_READ_BYTES
from hyport_lib.utils.redact import (REDACTED, PrivateKeyLines, is_secret_name, scrub_secret_shapes,
                                     scrub_text)

OOM = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"


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


@pytest.mark.parametrize("text, secret", [
    ('ERROR login failed password="correct horse battery', "correct horse"),  # cut or unclosed
    ("api_key: 'sk9-abc def", "sk9-abc"),
    ('curl --password "Hunter2pass" https://x', "Hunter2pass"),
    ("python run.py --hf-token 'abc123xyz' --x 1", "abc123xyz"),
    ("SSHPASS=Hunter3pass sshpass -e ssh root@h", "Hunter3pass"),
    ("DB_PASS=Hunter4pass ./run", "Hunter4pass"),
    ("+ sshpass -p \\\n   'Hunter5pass' ssh root@h", "Hunter5pass"),
    ("+ python run.py --password \\\n  Hunter6pass --x 1", "Hunter6pass"),
])
def test_secrets_the_landed_shapes_still_showed(text, secret):
    scrubbed = scrub_secret_shapes(text)
    assert secret not in scrubbed and REDACTED in scrubbed


def test_what_looks_like_a_pass_name_but_is_no_secret_is_left_alone():
    for text in ("PASS: tests/test_a.py", "TEST_PASS=3", "--pass 2", "PASS_RATE: 0.9"):
        assert scrub_secret_shapes(text) == text
    assert is_secret_name("SSHPASS") and is_secret_name("DB_PASSWD") and is_secret_name("SMTP_PASS")
    assert not is_secret_name("PASS") and not is_secret_name("BYPASS_CACHE")
    assert scrub_text("login with abcd1234", {"DB_PASSWD": "abcd1234"}) == "login with [redacted]"


def test_a_secret_on_the_line_after_a_continuation_is_redacted_in_a_log(tmp_path):
    log = tmp_path / "deploy.log"
    log.write_text("\n".join(["+ sshpass -p \\", "   'Hunter2pass' ssh root@h", OOM,
                              "+ curl -u \\", "  alice:Hunter7pass https://x", "step ok"]) + "\n",
                   encoding="utf-8")
    shown = json.dumps(triage([log]).to_dict())
    assert "Hunter2pass" not in shown and "Hunter7pass" not in shown and "ssh root@h" in shown


def test_a_quoted_secret_cut_by_the_long_line_split_shows_no_word(tmp_path):
    pad = ("x " * MAX_READ_BYTES)[:MAX_READ_BYTES - 39]  # the cut falls inside "horse"
    line = pad + 'ERROR login failed password="correct horse battery staple" for svc' + " y" * 40_000
    log = tmp_path / "cut.log"
    log.write_text(line + "\n", encoding="utf-8")
    shown = json.dumps(triage([log]).to_dict())
    assert "ERROR login failed" in shown
    assert not any(word in shown for word in ("correct", "horse", "battery", "staple"))


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
