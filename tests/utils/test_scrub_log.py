"""A log scrubbed in blocks: secrets, URL credentials and netrc passwords gone, a log with none
only read, never rewritten."""

from __future__ import annotations

import os

import hyport_lib.utils.scrub_log as scrub_log_module
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.scrub_log import scrub_log


def test_a_log_with_no_secret_is_only_read_not_rewritten(tmp_path):
    """Prose that says password, login, account or default is no netrc entry (issue 42
    review): the log keeps its bytes, inode and time."""
    log = tmp_path / "node0.log"
    log.write_text("[default0]:Error: login failed, password expired for user bob\n"
                   "[default0]:using default password policy\nhttps://huggingface.co/x\n")
    os.utime(log, (1_000_000_000,) * 2)
    inode = log.stat().st_ino
    assert scrub_log(log, {"PATH": "/usr/bin"}) is False
    assert log.stat().st_mtime == 1_000_000_000 and log.stat().st_ino == inode


def test_a_log_scrubbed_in_blocks_is_scrubbed_as_a_whole_text_is(tmp_path, monkeypatch):
    """The log is streamed in blocks of whole lines and only lines holding a secret's
    value, ``passw``, ``account`` or ``://`` (and the next) are scrubbed: with blocks of a few
    lines, a netrc entry, a value on the next line and a secret spanning lines that fall
    across blocks are redacted as :func:`scrub_text` redacts the whole text."""
    environ = {"SSH_KEY_SECRET": "line-one-Zz9\nline-two-Zz9", "HF_TOKEN": "hf-tok-Zz9-abc"}
    lines = [f"step {i} ok" for i in range(40)]
    lines[5:8] = ["machine h", "  login bob", "  password Zz9-multi"]
    lines[13:15] = ["[default0]:machine g login bob password", "[default0]:  Zz9-nextline"]
    lines[20:22] = ["key: line-one-Zz9", "line-two-Zz9 end"]
    lines[30] = "GET https://bob:Zz9-url@host/x with hf-tok-Zz9-abc, \u00e9t\u00e9"
    lines[33] = "[rank0]: password rotated"
    text = "\n".join(lines) + "\n"
    log = tmp_path / "node0.log"
    log.write_text(text, encoding="utf-8")
    monkeypatch.setattr(scrub_log_module, "_SCRUB_BLOCK", 37)
    assert scrub_log(log, environ) is True
    scrubbed = log.read_text(encoding="utf-8")
    assert scrubbed == scrub_text(text, environ)
    assert "Zz9" not in scrubbed and "[rank0]: password rotated" in scrubbed and "step 39 ok" in scrubbed
