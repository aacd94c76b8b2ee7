"""``hyport triage`` and :mod:`hyport_lib.triage` on real NPU failure logs.

The logs under ``tests/data/npu_logs/`` were copied from public issue threads (see its
``SOURCES.md``); each row of that file names the catalogue keys its log must produce, so a
new vendored log that no catalogue entry recognises fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import (CATALOGUE, Triage, cann_log_dir, find_logs, recognise, triage,
                               triage_frame, triage_markdown)
from hyport_lib.triage.scan import MAX_LINE_CHARS

LOGS = Path(__file__).parent / "data" / "npu_logs"


def _sources() -> list[dict]:
    """The rows of ``SOURCES.md``'s table."""
    rows = []
    for line in (LOGS / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("File", "---") or set(cells[0]) <= {"-"}:
            continue
        keys = [] if cells[1] == "-" else [k.strip() for k in cells[1].split(",")]
        rows.append({"file": cells[0], "expects": keys, "repository": cells[2], "issue": cells[3],
                     "url": cells[4], "title": cells[5], "lines": cells[6]})
    return rows


SOURCES = _sources()


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["triage", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _json(capsys, *argv) -> tuple[int, dict]:
    code, out, _ = _cli(capsys, *argv, "--json")
    return code, json.loads(out)


# --------------------------------------------------------------------------- vendored real logs
def test_every_vendored_log_has_a_sources_row_and_every_row_a_log():
    listed = {row["file"] for row in SOURCES}
    assert listed == {p.name for p in LOGS.glob("*.log")}
    for row in SOURCES:
        assert row["url"].startswith("https://github.com/") and row["issue"].split()[0] in row["url"]
        assert row["repository"] in ("vllm-project/vllm-ascend", "hiyouga/LLaMA-Factory",
                                     "Ascend/pytorch", "Ascend/MindSpeed"), row
        assert row["title"] and row["lines"], row


@pytest.mark.parametrize("row", [r for r in SOURCES if r["expects"]], ids=lambda r: r["file"])
def test_hyport_triage_recognises_each_vendored_log(row, capsys):
    path = LOGS / row["file"]
    code, data = _json(capsys, path)
    found = {f["key"]: f for f in data["findings"]}
    assert set(row["expects"]) <= set(found), (row["file"], sorted(found))
    assert not data["unrecognised"], data["unrecognised"]
    errors = [k for k in row["expects"] if found[k]["severity"] == "error"]
    assert code == (1 if errors else 0)
    lines = path.read_text(encoding="utf-8").splitlines()
    code, text, _ = _cli(capsys, path)
    for key in row["expects"]:
        finding = found[key]
        # It names file:line, that line is really there, and it says what to do.
        assert lines[finding["line"] - 1].strip().startswith(finding["text"].strip().rstrip("…"))
        assert f"{row['file']}:{finding['line']}" in text
        assert finding["action"] in text and finding["meaning"] in text
        assert row["file"] in finding["sources"] or key == "cpu_fallback"


def test_ordinary_log_noise_is_neither_a_finding_nor_an_error_line(capsys):
    # Real plog INFO lines that name HCCL_EXEC_TIMEOUT, HCCL_CONNECT_TIMEOUT and a watchdog.
    code, data = _json(capsys, LOGS / "noise.vllm-ascend-5468.log")
    assert code == 0 and data["findings"] == [] and data["unrecognised"] == []
    # torch_npu's warning that the HCCL execution timeout exceeds the watchdog's is no timeout.
    code, data = _json(capsys, LOGS / "npu_oom.vllm-ascend-1127.log")
    assert [f["key"] for f in data["findings"]] == ["npu_out_of_memory"]


def test_every_catalogue_entry_is_built_from_vendored_logs_it_recognises():
    for entry in CATALOGUE:
        assert entry.sources, entry.key
        for name in entry.sources:
            assert entry.key in {f.key for f in triage([LOGS / name]).findings}, (entry.key, name)


def test_a_more_specific_entry_wins_over_a_broader_one():
    # The EI0013 line says "HCCL watchdog thread terminated": a link error, not a timeout.
    line = (LOGS / "hccl_link_error.vllm-ascend-7384.log").read_text(encoding="utf-8").splitlines()[1]
    assert recognise(line).key == "hccl_link_error"


# --------------------------------------------------------------------------- unknown and clean
def test_an_unknown_error_is_not_recognised_and_its_lines_are_shown(tmp_path, capsys):
    log = tmp_path / "worker.log"
    log.write_text("loading shards\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
                   "ValueError: the tokenizer has no pad token\nstep 1 done\n", encoding="utf-8")
    code, text, _ = _cli(capsys, log)
    assert code == 1
    assert "no known failure; 2 error lines not recognised" in text
    assert "not recognised" in text
    assert "2: Traceback (most recent call last):" in text
    assert "4: ValueError: the tokenizer has no pad token" in text


def test_a_clean_log_says_no_error_lines(tmp_path, capsys):
    log = tmp_path / "clean.log"
    log.write_text("step 1 loss 2.31\nstep 2 loss 2.02\nsaved checkpoint-2\n", encoding="utf-8")
    code, text, _ = _cli(capsys, log)
    assert code == 0 and "no error lines" in text and "FAILURE" not in text


def test_a_warning_does_not_explain_an_error_line(tmp_path):
    log = tmp_path / "mixed.log"
    shutil.copy(LOGS / "cpu_fallback.torch_npu-51.log", log)
    with log.open("a", encoding="utf-8") as handle:
        handle.write("RuntimeError: something the catalogue does not know\n")
    result = triage([log])
    assert [f.key for f in result.findings] == ["cpu_fallback"]
    assert result.unrecognised[0].lines == [[2, "RuntimeError: something the catalogue does not know"]]
    assert result.failed and result.summary_line().startswith("no known failure; 1 error line")


# --------------------------------------------------------------------------- run folders
def _rank_log(run: Path, rank: int) -> Path:
    return run / "train" / "demo" / "logs" / "ranks" / "abc" / "attempt_0" / str(rank) / "stderr.log"


def test_the_same_failure_in_many_rank_logs_is_one_finding_with_its_places(tmp_path):
    oom = (LOGS / "npu_oom.llama-factory-5491.log").read_text(encoding="utf-8")
    for rank in range(12):
        path = _rank_log(tmp_path, rank)
        path.parent.mkdir(parents=True)
        path.write_text(f"rank {rank} starting\n" + oom, encoding="utf-8")
    result = triage([tmp_path])
    assert [f.key for f in result.findings] == ["npu_out_of_memory"]
    finding = result.findings[0]
    assert finding.occurrences == 12 and len(finding.places) + finding.more_places == 12
    # Rank 0 first, then natural order (2 before 10); paths relative to the folder given.
    assert finding.where == "train/demo/logs/ranks/abc/attempt_0/0/stderr.log:6"
    assert [p.file.split("/")[-2] for p in finding.places][:3] == ["0", "1", "2"]
    assert finding.context[0] == "  File \"/usr/local/python3.10.13/lib/python3.10/site-packages/" \
                                 "accelerate/utils/modeling.py\", line 400, in set_module_tensor_to_device"
    assert result.summary_line() == ("device out of memory "
                                     "(train/demo/logs/ranks/abc/attempt_0/0/stderr.log:6)")


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


def test_a_very_long_line_is_cut_and_line_numbers_stay_right(tmp_path):
    log = tmp_path / "long.log"
    log.write_text("x" * 200_000 + " NPU out of memory. Tried to allocate 1 GiB\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n", encoding="utf-8")
    finding = triage([log]).findings[0]
    assert finding.line == 2 and len(finding.context[0]) <= MAX_LINE_CHARS


# --------------------------------------------------------------------------- CANN log folder
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


def test_the_cann_log_folder_is_read_since_the_run_began(tmp_path):
    folder, start = _cann_folder(tmp_path)
    rank = tmp_path / "run" / "stderr.log"
    rank.parent.mkdir()
    rank.write_text("RuntimeError: HCCL function error\n", encoding="utf-8")
    result = triage([rank.parent], cann_log_dir=folder, since=start)
    keys = {f.key for f in result.findings}
    assert keys == {"hccl_port_in_use", "hccl_connect_timeout", "aicore_exception"}
    assert not any("plog-100" in f for f in result.files_read)
    assert result.since == start and result.cann_log_dir == str(folder)
    everything = triage([rank.parent], cann_log_dir=folder)
    assert "device_in_use" in {f.key for f in everything.findings}
    missing = triage([rank.parent], cann_log_dir=tmp_path / "no-cann")
    assert any("does not exist" in n for n in missing.notes) and missing.unrecognised


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


# --------------------------------------------------------------------------- secrets
def test_a_secret_in_a_log_line_never_reaches_the_output(tmp_path, capsys, monkeypatch):
    secret = "tok-51a7-very-private"
    monkeypatch.setenv("DEMO_HF_TOKEN", secret)
    known = tmp_path / "a.log"
    known.write_text(f"export HF_TOKEN={secret}\nRuntimeError: NPU out of memory. Tried to allocate "
                     f"2.00 GiB (token {secret})\n", encoding="utf-8")
    unknown = tmp_path / "b.log"
    unknown.write_text(f"ERROR pulling https://user:hunter2pw@mirror.example/x with {secret}\n",
                       encoding="utf-8")
    code, text, err = _cli(capsys, known, unknown)
    code_json, out_json, _ = _cli(capsys, known, unknown, "--json")
    markdown = "\n".join(triage_markdown(triage([known, unknown])))
    for shown in (text, err, out_json, markdown):
        assert secret not in shown and "hunter2pw" not in shown
    assert "[redacted]" in text and code == code_json == 1


# --------------------------------------------------------------------------- command and API
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


def test_json_round_trips_through_triage_from_dict(capsys):
    code, data = _json(capsys, LOGS / "hccl_connect_timeout.llama-factory-5071.log",
                       LOGS / "npu_oom.vllm-ascend-1127.log")
    again = Triage.from_dict(data)
    assert again.to_dict() == data and code == 1
    assert again.summary_line() == triage([LOGS / "hccl_connect_timeout.llama-factory-5071.log",
                                          LOGS / "npu_oom.vllm-ascend-1127.log"]).summary_line()
    broken = dict(data, findings=[{k: v for k, v in data["findings"][0].items() if k != "title"}])
    with pytest.raises(ValueError, match="triage finding: missing field.*title"):
        Triage.from_dict(broken)


def test_frame_and_markdown_show_findings_and_unrecognised_lines(tmp_path):
    odd = tmp_path / "odd.log"
    odd.write_text("E39999: Inner Error!\n", encoding="utf-8")
    result = triage([LOGS / "hccl_exec_timeout.vllm-ascend-382.log", odd])
    frame = triage_frame(result)
    assert list(frame["kind"]) == ["error", "not recognised"]
    assert frame.iloc[0]["where"].endswith("hccl_exec_timeout.vllm-ascend-382.log:1")
    markdown = "\n".join(triage_markdown(result))
    assert "**Failure: HCCL collective timed out**" in markdown
    assert "*What to do:*" in markdown and "HCCL_EXEC_TIMEOUT" in markdown
    assert "**Not recognised:**" in markdown and "1: E39999: Inner Error!" in markdown
    assert re.search(r"^```text$", markdown, re.M)


def test_the_docs_table_lists_every_catalogue_entry_and_its_examples():
    doc = (Path(__file__).parents[1] / "docs" / "triage.md").read_text(encoding="utf-8")
    for entry in CATALOGUE:
        row = next((line for line in doc.splitlines() if f"(`{entry.key}`)" in line), None)
        assert row is not None, entry.key
        assert entry.title in row and all(name in row for name in entry.sources), entry.key


def test_a_pattern_is_only_skipped_on_lines_without_its_needle():
    from hyport_lib.triage.catalogue import needle

    assert needle(r"ab?cd") == "cd" and needle(r"x|y") == "" and needle(r"a(?:bbb|c)dd") == "dd"
    assert needle(r"port\[\d+\] fail") == "] fail" and needle(r"\(EI0013\)") == "(EI0013)"
    lines = [line for path in LOGS.glob("*.log")
             for line in path.read_text(encoding="utf-8").splitlines()]
    checked = 0
    for entry in CATALOGUE:
        for text, rx in entry.compiled:
            for line in lines:
                if rx.search(line):
                    assert text in line, (entry.key, rx.pattern, line)
                    checked += 1
    assert checked >= len(SOURCES)
