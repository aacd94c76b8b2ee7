"""``hyport triage``: CANN logs with ``--since`` or ``--all``, exit codes, one-line errors,
and nothing read being exit 2, not "no error"."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import Triage, cann_log_dir, triage

from .test_catalogue import _cli, _json
from .test_log_files import _cann_folder, _fifo


LOGS = Path(__file__).parents[1] / "data" / "npu_logs"


def test_the_command_reads_cann_logs_with_since_or_all(tmp_path, capsys, monkeypatch):
    folder, start = _cann_folder(tmp_path)
    clean = tmp_path / "clean.log"
    clean.write_text("ok\n", encoding="utf-8")
    iso = datetime.fromtimestamp(start).isoformat(timespec="seconds")
    code, data = _json(capsys, clean, "--cann-logs", folder, "--since", iso)
    assert code == 1 and "device_in_use" not in {f["key"] for f in data["findings"]}
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(folder))
    assert cann_log_dir() == folder
    code, data = _json(capsys, clean, "--all")
    assert "device_in_use" in {f["key"] for f in data["findings"]}
    code, data = _json(capsys, clean)  # without --cann-logs, --since or --all: the path only
    assert code == 0 and data["findings"] == [] and data["cann_log_dir"] is None
    monkeypatch.delenv("ASCEND_PROCESS_LOG_PATH")
    assert cann_log_dir({"HOME": "/home/u"}) == Path("/home/u/ascend/log")


def test_exit_codes_and_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYPORT_DEBUG", raising=False)
    code, out, err = _cli(capsys, tmp_path / "missing")
    assert code == 2 and err.strip() == f"hyport triage: {tmp_path / 'missing'}: no such file or folder"
    log = LOGS / "cpu_fallback.torch_npu-51.log"
    assert _cli(capsys, log)[0] == 0  # a warning alone is not a failure
    code, _, err = _cli(capsys, log, "--cann-logs", tmp_path / "nope")
    assert code == 2 and "--cann-logs" in err and "\n" not in err.strip()
    code, _, err = _cli(capsys, log, "--since", "yesterday")
    assert code == 2 and "--since 'yesterday'" in err
    with pytest.raises(SystemExit) as stop:
        main(["triage", str(log), "--since", "2026-01-01", "--all"])
    assert stop.value.code == 2


def test_nothing_read_is_exit_2_not_no_error(tmp_path, capsys, monkeypatch):
    """L1: an unreadable log, a FIFO as PATH or a folder without logs is not "no error"."""
    from hyport_lib.utils import bounded_files

    log = tmp_path / "logs" / "rank1.log"
    log.parent.mkdir()
    log.write_text("RuntimeError: NPU out of memory. Tried to allocate 1 GiB\n", encoding="utf-8")
    real_open = bounded_files.open_regular

    def refuse(path, folder=None):  # triage reads through the project's one reader
        if Path(path) == log:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, folder)

    monkeypatch.setattr(bounded_files, "open_regular", refuse)
    for argv in ([log], [log.parent]):
        code, out, err = _cli(capsys, *argv)
        assert code == 2 and out == "" and "no log could be read: rank1.log: not read (Permission denied)" in err
    assert triage([log]).summary_line() == "no log could be read"
    (log.parent / "clean.log").write_text("ok\n", encoding="utf-8")
    code, out, _ = _cli(capsys, log.parent)
    assert code == 0 and "no error lines; 1 log file could not be read" in out
    code, _, err = _cli(capsys, _fifo(tmp_path / "fifo_arg"))
    assert code == 2 and "not a regular file or folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _cli(capsys, tmp_path / "empty")
    assert code == 2 and "no log file under" in err and len(err.strip().splitlines()) == 1
    assert Triage().summary_line() == "no log file found"
