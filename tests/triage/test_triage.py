"""``hyport triage`` and :mod:`hyport_lib.triage` on real NPU failure logs.

The logs under ``tests/data/npu_logs/`` were copied from public issue threads (see its
``SOURCES.md``); each row of that file names the catalogue keys its log must produce, so a
new vendored log that no catalogue entry recognises fails here. Those under
``tests/data/hyport_logs/`` are hyport's own output when its attention refuses what a model
asks (see its ``README.md``), read the same way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import (CATALOGUE, Triage, cann_log_dir, find_logs, recognise, triage,
                               triage_frame, triage_markdown)
from hyport_lib.triage.scan import MAX_LINE_CHARS, is_error_line

LOGS = Path(__file__).parents[1] / "data" / "npu_logs"
#: hyport's own refusals: not NPU logs and from no issue thread, so kept apart from LOGS
#: (whose SOURCES.md demands a public source for every file).
HYPORT_LOGS = Path(__file__).parents[1] / "data" / "hyport_logs"


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


def _hyport_rows() -> list[dict]:
    """The rows of ``hyport_logs/README.md``'s table: file and expected keys."""
    rows = []
    for line in (HYPORT_LOGS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] not in ("File",) and not set(cells[0]) <= {"-"}:
            rows.append({"file": cells[0], "expects": [k.strip() for k in cells[1].split(",")]})
    return rows


def _source(name: str) -> Path:
    """A catalogue entry's source log, in whichever of the two folders holds it (one only)."""
    found = [folder / name for folder in (LOGS, HYPORT_LOGS) if (folder / name).is_file()]
    assert len(found) == 1, (name, found)
    return found[0]


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


def test_catalogue_entries_are_well_formed():
    assert len({entry.key for entry in CATALOGUE}) == len(CATALOGUE), "two entries share a key"
    for entry in CATALOGUE:
        assert entry.severity in ("error", "warning"), entry.key
        assert entry.patterns, f"{entry.key}: no pattern"


def test_every_catalogue_entry_is_built_from_vendored_logs_it_recognises():
    for entry in CATALOGUE:
        assert entry.sources, entry.key
        for name in entry.sources:
            assert entry.key in {f.key for f in triage([_source(name)]).findings}, (entry.key, name)


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
    doc = (Path(__file__).parents[2] / "docs" / "triage.md").read_text(encoding="utf-8")
    for entry in CATALOGUE:
        row = next((line for line in doc.splitlines() if f"(`{entry.key}`)" in line), None)
        assert row is not None, entry.key
        assert entry.title in row and all(name in row for name in entry.sources), entry.key


def test_a_pattern_is_only_skipped_on_lines_without_its_needle():
    from hyport_lib.triage.catalogue import needle

    assert needle(r"ab?cd") == "cd" and needle(r"x|y") == "" and needle(r"a(?:bbb|c)dd") == "dd"
    assert needle(r"port\[\d+\] fail") == "] fail" and needle(r"\(EI0013\)") == "(EI0013)"
    lines = [line for path in [*LOGS.glob("*.log"), *HYPORT_LOGS.glob("*.log")]
             for line in path.read_text(encoding="utf-8").splitlines()]
    checked = 0
    for entry in CATALOGUE:
        for text, rx in entry.compiled:
            for line in lines:
                if rx.search(line):
                    assert text in line, (entry.key, rx.pattern, line)
                    checked += 1
    assert checked >= len(SOURCES)


# --------------------------------------------------------------------------- review fixes
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


def test_secrets_written_like_secrets_are_redacted_without_the_environment(tmp_path, capsys, monkeypatch):
    """H2: a copied log holds tokens and passwords this process's environment does not know."""
    from hyport_lib.utils.redact import scrub_secret_shapes

    token, password = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "Sup3rS3cret!"
    for name in [k for k in os.environ if "TOKEN" in k.upper() or "PASS" in k.upper()]:
        monkeypatch.delenv(name)
    log = tmp_path / "stderr.log"
    log.write_text(f"+ export HF_TOKEN={token}\n"
                   f"launch: python train.py --password={password} --hf-token {token[:-3]}xyz\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
                   f"ValueError: bad login password={password} token={token}\n", encoding="utf-8")
    other = tmp_path / "other.log"
    other.write_text(f"ERROR: request failed, headers={{'Authorization': 'Bearer {token}'}}\n"
                     f'ERROR: config {{"api_key": "zq-7f3a9c11"}}\n', encoding="utf-8")
    result = triage([tmp_path])
    shown = json.dumps(result.to_dict()) + "\n".join(triage_markdown(result)) + _cli(capsys, tmp_path)[1]
    for secret in (token, password, token[:-3], "zq-7f3a9c11"):
        assert secret not in shown, secret
    assert "HF_TOKEN=[redacted]" in shown and "password=[redacted]" in shown
    # What only looks like a secret name is left alone.
    plain = ("KeyError: 'lm_head.weight' TOKENIZERS_PARALLELISM=false pad_token_id=0 "
             "num_key_value_heads: 8 max_new_tokens=512 url=https://mirror.example/x")
    assert scrub_secret_shapes(plain) == plain
    assert scrub_secret_shapes("PASSWORD=123456") == "PASSWORD=[redacted]"
    # A secret assignment after a ``word:`` that names no secret (review D1: the word's
    # value swallowed the assignment and neither was redacted).
    behind_words = {
        "wandb: ERROR api: WANDB_API_KEY=0123456789abcdef": "wandb: ERROR api: WANDB_API_KEY=[redacted]",
        "ValueError: invalid config: token=abcdefgh1234 secret=zzz111":
            "ValueError: invalid config: token=[redacted] secret=[redacted]",
        "env: DB_PASSWORD=p4ssw0rd!": "env: DB_PASSWORD=[redacted]",
        "x token: secret=xyz": "x token: [redacted]",
        "token=abc==": "token=[redacted]",
    }
    assert {line: scrub_secret_shapes(line) for line in behind_words} == behind_words


def test_the_cause_is_named_before_the_hccl_timeout_it_caused(tmp_path):
    """M2b: rank 0 (read first) timed out waiting for rank 1, which ran out of memory."""
    for rank, source in ((0, "hccl_exec_timeout.vllm-ascend-382.log"), (1, "npu_oom.llama-factory-5491.log")):
        path = _rank_log(tmp_path, rank)
        path.parent.mkdir(parents=True)
        shutil.copy(LOGS / source, path)
    result = triage([tmp_path])
    assert [f.key for f in result.findings] == ["npu_out_of_memory", "hccl_exec_timeout"]
    assert result.summary_line().startswith("device out of memory (train/demo/logs/ranks/abc/attempt_0/1/")
    assert result.findings[1].consequence and Triage.from_dict(result.to_dict()) == result
    # A timeout beside lines nothing recognises: the summary points at them too.
    (_rank_log(tmp_path, 1)).write_text("ValueError: rank 1 gave up\n", encoding="utf-8")
    summary = triage([tmp_path]).summary_line()
    assert summary.startswith("HCCL collective timed out") and "1 error line not recognised" in summary
    # One log for every rank (torchrun's own): the timeout beside rank 1's exception does not
    # hide it (review D2); the lines that only frame an error are not listed as causes.
    combined = tmp_path / "torchrun.log"
    combined.write_text("[rank1]: Traceback (most recent call last):\n"
                        '[rank1]:   File "train.py", line 10, in <module>\n'
                        "[rank1]: ValueError: Expected input batch_size (8) to match target batch_size (4).\n"
                        "[rank1]: [ERROR] 2025-04-08-18:07:20 (PID:12, Device:1, RankID:1) ERR01100 OPS call "
                        "acl api failed.\n"
                        "[rank0]:[E324 12:00:00] [Rank 0] Watchdog caught collective operation timeout: "
                        "WorkHCCL(SeqNum=196, OpType=ALLREDUCE) ran for 1800185 milliseconds before timing out.\n",
                        encoding="utf-8")
    alone = triage([combined])
    assert [f.key for f in alone.findings] == ["hccl_exec_timeout"]
    assert [[number for number, _ in u.lines] for u in alone.unrecognised] == [[3]]
    assert "1 error line not recognised" in alone.summary_line()
    # torch_npu's own wrapping of an HCCL failure, as the vendored logs print it, is no cause
    # (review E3): beside a timeout alone, nothing is left unrecognised
    vendored = [line for name, number in (("hccl_port_in_use.vllm-ascend-405.log", 1),
                                          ("hccl_port_in_use.vllm-ascend-405.log", 2),
                                          ("aicore_exception.llama-factory-3670.log", 19))
                for line in [(LOGS / name).read_text(encoding="utf-8").splitlines()[number - 1]]]
    assert all(is_error_line(line) for line in vendored), vendored
    combined.write_text("\n".join(vendored) + "\n[rank0]:[E324 12:00:00] [Rank 0] Watchdog caught collective "
                        "operation timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE) ran for 1800185 milliseconds "
                        "before timing out.\n", encoding="utf-8")
    framed = triage([combined])
    assert [f.key for f in framed.findings] == ["hccl_exec_timeout"] and framed.unrecognised == [], framed


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


def test_warning_and_info_lines_are_not_error_lines(tmp_path):
    """L2: vLLM's warning about vllm._C names an exception, yet the log is healthy."""
    noise = [
        "WARNING 12-01 10:00:00 [_custom_ops.py:21] Failed to import from vllm._C with "
        "ModuleNotFoundError(\"No module named 'vllm._C'\")",
        "(EngineCore pid=4242) WARNING 12-01 10:00:00 [x.py:1] retrying after ConnectionError",
        "[W compiler_depend.ts:164] Warning: Device do not support double dtype now, dtype cast "
        "repalce with float. (function operator())",
        "/site-packages/torch_npu/utils/path_manager.py:82: UserWarning: Warning: The owner does "
        "not match the current user. Error prone",
        "[2026-12-01 10:00:02,000] [INFO] [real_accelerator.py:222] ValueError handling on",
    ]
    errors = ["(EngineCore pid=4242) ERROR 12-01 10:00:03 [core.py:1] EngineCore failed",
              "[rank1]:[E ProcessGroupHCCL.cpp:10] Error: HCCL function failed",
              "RuntimeError: the warning above was fatal (WARNING)",
              "E39999: Inner Error!"]
    log = tmp_path / "worker.log"
    log.write_text("\n".join(noise + errors) + "\n", encoding="utf-8")
    result = triage([log])
    assert [n for n, _ in result.unrecognised[0].lines] == list(range(len(noise) + 1, len(noise + errors) + 1))
    log.write_text("\n".join(noise) + "\n", encoding="utf-8")
    assert not triage([log]).failed and triage([log]).summary_line() == "no error lines"


def test_a_torchrun_master_port_conflict_is_not_called_an_hccl_port_conflict(tmp_path):
    """L3: "Address already in use" is the rendezvous port; no vendored log ties it to HCCL."""
    log = tmp_path / "torchrun.log"
    log.write_text("torch.distributed.DistNetworkError: The server socket has failed to listen on any "
                   "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
                   "message: address already in use (errno: 98 - Address already in use)\n",
                   encoding="utf-8")
    result = triage([log])
    assert result.findings == [] and result.unrecognised_count == 1


def test_secrets_of_the_given_environment_are_scrubbed(tmp_path, monkeypatch):
    """L7: the failed job's environment (a stage's extra_env) may hold a token this process lacks."""
    monkeypatch.delenv("JOB_API_KEY", raising=False)
    secret = "zq-7f3a9c11-private"
    log = tmp_path / "card0.log"
    log.write_text(f"ERROR upload to bucket {secret} failed\n", encoding="utf-8")
    assert secret in json.dumps(triage([log]).to_dict())  # nothing says it is a secret...
    scrubbed = triage([log], environ={"JOB_API_KEY": secret})  # ...unless the job's env does
    assert secret not in json.dumps(scrubbed.to_dict()) and "[redacted]" in scrubbed.unrecognised[0].lines[0][1]


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


# --------------------------------------------------------------------------- hyport's own refusals
REFUSED = "hyport_attention_refused"
REFUSED_TITLE = "hyport attention refused an argument or feature"
#: Rank 0's traceback as hyport's attention ends it (the format of the real run in
#: hyport_logs/, with a position bias instead of Gemma 2's soft-cap), behind torchrun's
#: ``--tee`` prefix as ``hyport train`` starts it.
RANK0_REFUSAL = [
    "[default0]:[rank0]: Traceback (most recent call last):",
    '[default0]:[rank0]:   File "/opt/hyport/hyport_lib/npu_attention/hf_integration.py", line 183, '
    "in attention_forward",
    "[default0]:[rank0]:     check_attention_arguments(module, kwargs)",
    '[default0]:[rank0]:   File "/opt/hyport/hyport_lib/npu_attention/hf_integration.py", line 159, '
    "in check_attention_arguments",
    "[default0]:[rank0]:     raise UnsupportedAttentionArgument(",
    "[default0]:[rank0]: hyport_lib.npu_attention.hf_integration.UnsupportedAttentionArgument: hyport "
    "attention: T5Attention (layer 0) passed position_bias=<tensor (1, 4, 9, 9) float32>, a position "
    "bias added to the scores, which hyport's attention does not compute with; it is refused rather "
    "than dropped (that would compute a different attention): use attn_implementation='eager' for "
    "this model",
]
#: torchrun's ChildFailedError summary naming rank 0, its traceback from the error file
#: indented by two spaces (the real run's layout).
ROOT_CAUSE = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : 1 (pid: 9760) ",
    "  error_file: /tmp/torchelastic_x/none_ab12/attempt_0/0/error.json",
    "  traceback : Traceback (most recent call last):",
    "    File \"/opt/hyport/hyport_lib/npu_attention/hf_integration.py\", line 159, in check_attention_arguments",
    "      raise UnsupportedAttentionArgument(",
    "  " + RANK0_REFUSAL[-1].split("[rank0]: ", 1)[1],
    "============================================================",
]
#: Rank 1 waiting for rank 0 in its next all-reduce: the real watchdog lines of
#: npu_logs/hccl_exec_timeout.vllm-ascend-382.log (rank 1 there too), behind the tee prefix.
RANK1_HCCL_TIMEOUT = ["[default1]:" + line for line in
                      (LOGS / "hccl_exec_timeout.vllm-ascend-382.log").read_text(encoding="utf-8")
                      .splitlines()[:4]]
#: The same wait on gloo (a CPU or mixed group): gloo's own timeout message.
RANK1_GLOO_TIMEOUT = [
    "[default0]:[rank1]: Traceback (most recent call last):",
    '[default0]:[rank1]:   File "/opt/hyport/hyport_lib/train/worker.py", line 301, in main',
    "[default0]:[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
    "Timed out waiting 1800000ms for recv operation to complete",
]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_rank_stopped_by_hyports_refusal_is_named_before_the_timeouts_it_caused(tmp_path, capsys):
    """Issue 28 item 7: rank 0 refused an attention argument, rank 1 then timed out; the
    diagnosis names hyport's refusal, with the argument, as the cause."""
    combined = _write(tmp_path / "one" / "torchrun.log",
                      ["[default0]:rank 0: step 1", "[default1]:rank 1: step 1", *RANK0_REFUSAL,
                       *RANK1_HCCL_TIMEOUT, *ROOT_CAUSE])
    result = triage([combined])
    assert [f.key for f in result.findings] == [REFUSED, "hccl_exec_timeout"]
    cause = result.findings[0]
    refusal_line = 2 + len(RANK0_REFUSAL)  # the exception line, not the traceback's source line
    assert cause.title == REFUSED_TITLE and not cause.consequence and cause.line == refusal_line
    assert "UnsupportedAttentionArgument" in cause.text and "passed position_bias=<tensor" in cause.text
    assert cause.occurrences == 2  # rank 0's line and torchrun's summary of it
    assert result.summary_line() == f"{REFUSED_TITLE} (torchrun.log:{refusal_line}); 1 more finding"
    # The cause explains every other error line of the file: nothing is left "not recognised".
    assert result.unrecognised == []
    code, text, _ = _cli(capsys, combined)
    assert code == 1 and f"FAILURE: {REFUSED_TITLE}  [{REFUSED}]" in text
    assert "passed position_bias=" in text and "packing=false" in text
    assert "attn_implementation='eager'" in text and "hyport attention --model-path <model>" in text

    # Two nodes, each with its own torchrun log; node-a (rank 1, read first) timed out.
    nodes = tmp_path / "nodes"
    _write(nodes / "node-a" / "torchrun.log", RANK1_HCCL_TIMEOUT)
    _write(nodes / "node-b" / "torchrun.log", RANK0_REFUSAL)
    result = triage([nodes])
    assert result.files_read[0].startswith("node-a/")
    assert [f.key for f in result.findings] == [REFUSED, "hccl_exec_timeout"]
    assert result.summary_line().startswith(f"{REFUSED_TITLE} (node-b/torchrun.log:{len(RANK0_REFUSAL)})")
    # On gloo the wait ends in gloo's own message, which no entry knows: still the refusal
    # is the diagnosis, and the gloo line is listed as not recognised, not hidden.
    _write(nodes / "node-a" / "torchrun.log", RANK1_GLOO_TIMEOUT)
    result = triage([nodes])
    assert [f.key for f in result.findings] == [REFUSED]
    assert result.summary_line() == f"{REFUSED_TITLE} (node-b/torchrun.log:{len(RANK0_REFUSAL)})"
    assert [u.file for u in result.unrecognised] == ["node-a/torchrun.log"]
    assert "Timed out waiting 1800000ms" in result.unrecognised[0].lines[-1][1]


@pytest.mark.parametrize("line", [
    # hyport's attention before UnsupportedAttentionArgument, as issue 28 quotes it
    "hyport_lib.npu_attention.flash_api.FlashAttnUnsupported: hyport attention: softcap is not "
    "supported; use eager",
    # the flash-attn drop-in (remote code), behind torchrun's prefixes
    "[default1]:[rank1]: hyport_lib.npu_attention.flash_api.FlashAttnUnsupported: "
    "flash_attn_func(alibi_slopes='<tensor>') is not supported by hyport's flash-attn drop-in",
    # torchrun's error.json, which quotes the class by its bare name
    '{"message": {"message": "UnsupportedAttentionArgument: hyport attention: GptOssAttention (layer 0) '
    'passed s_aux=<tensor (8,) bfloat16>, attention sinks", "extraInfo": {"timestamp": "1764716436"}}}',
    # the message under another exception (a wrapper re-raising it), with the backend named
    "RuntimeError: hyport attention (npu): the float attention mask carries a bias (values other than "
    "0 and -inf); NPU fusion attention takes only a boolean mask",
    "NotImplementedError: hyport attention: attention sinks (s_aux) are not supported",
], ids=["flash-api-softcap", "drop-in-rank-prefix", "error-json", "wrapped-npu", "not-implemented"])
def test_each_form_of_hyports_refusal_is_recognised(line):
    assert recognise(line) is not None and recognise(line).key == REFUSED


@pytest.mark.parametrize("line", [
    "INFO hyport attention: 28 layers use hyport_npu_fused",
    "[2026-12-01 10:00:00] registered hyport attention as 'hyport_npu_fused' (backend npu)",
    "$ hyport attention --model-path /models/gemma-2-2b --device npu",
    "hyport: attention check passed (max abs diff 1.2e-3 vs eager)",
    "ERROR hyport train: --packing must be true or false",
    # a traceback's source line quotes the message but is not the failure; nor an import
    '    raise FlashAttnUnsupported("hyport attention: softcap is not supported; use eager")',
    "from hyport_lib.npu_attention.flash_api import FlashAttnAPI, FlashAttnUnsupported",
    "    except FlashAttnUnsupported:",
    # malformed q/k/v: a bug to read, not a refusal of a feature
    "ValueError: hyport attention: 32 query heads are not a multiple of 6 key/value heads",
], ids=["info", "registered", "command", "check", "other-error", "source-line", "import", "except",
        "value-error"])
def test_other_lines_that_mention_hyport_are_not_a_refusal(line):
    found = recognise(line)
    assert found is None, (found.key, line)


def test_a_refusals_traceback_points_at_its_exception_line_and_a_value_error_stays_unknown(tmp_path):
    log = _write(tmp_path / "stderr.log", [
        "Traceback (most recent call last):",
        '  File "/opt/hyport/hyport_lib/npu_attention/hf_integration.py", line 117, in attention_forward',
        '    raise FlashAttnUnsupported("hyport attention: softcap is not supported; use eager")',
        "hyport_lib.npu_attention.flash_api.FlashAttnUnsupported: hyport attention: softcap is not "
        "supported; use eager"])
    finding = triage([log]).findings[0]
    assert (finding.key, finding.line, finding.occurrences) == (REFUSED, 4, 1)
    _write(log, ["Traceback (most recent call last):",
                 "ValueError: hyport attention: 32 query heads are not a multiple of 6 key/value heads"])
    result = triage([log])
    assert result.findings == [] and [n for n, _ in result.unrecognised[0].lines] == [1, 2]


@pytest.mark.parametrize("row", _hyport_rows(), ids=lambda r: r["file"])
def test_hyports_own_logs_give_their_finding_and_nothing_unrecognised(row, capsys):
    path = HYPORT_LOGS / row["file"]
    code, data = _json(capsys, path)
    assert [f["key"] for f in data["findings"]] == row["expects"] and data["unrecognised"] == []
    assert code == 1
    lines = path.read_text(encoding="utf-8").splitlines()
    for finding in data["findings"]:
        assert lines[finding["line"] - 1].startswith(finding["text"].rstrip("…"))
        assert row["file"] in finding["sources"]


def test_every_hyport_log_has_a_readme_row_and_is_a_catalogue_source():
    listed = {row["file"] for row in _hyport_rows()}
    assert listed == {p.name for p in HYPORT_LOGS.glob("*.log")} and listed
    sources = {name for entry in CATALOGUE for name in entry.sources}
    assert listed <= sources
    # The torchrun run holds both ranks' tracebacks and torchrun's summary of each.
    finding = triage([HYPORT_LOGS / "unsupported_attention_argument.gemma2-torchrun.log"]).findings[0]
    assert finding.occurrences == 4 and "passed softcap=50.0" in finding.text


def test_a_secret_a_refusal_quotes_is_redacted_and_the_argument_still_named(tmp_path, capsys, monkeypatch):
    # The refusal quotes short values of what it refuses: a token passed down as a keyword.
    token = "hf_AbCdEfGhIjKlMnOpQrStUv"
    for name in [k for k in os.environ if "TOKEN" in k.upper()]:
        monkeypatch.delenv(name)
    log = _write(tmp_path / "stderr.log", [
        "[default0]:[rank0]: hyport_lib.npu_attention.hf_integration.UnsupportedAttentionArgument: "
        f"hyport attention: LlamaAttention (layer 0) passed hf_token='{token}', an argument which "
        "hyport's attention does not compute with"])
    result = triage([log])
    assert result.findings[0].key == REFUSED
    shown = json.dumps(result.to_dict()) + "\n".join(triage_markdown(result)) + _cli(capsys, log)[1]
    assert token not in shown and "passed hf_token='[redacted]'" in shown


def test_the_refusal_patterns_stay_linear_on_hostile_lines():
    # A long line built to make a backtracking pattern try every start again must still be
    # read at scanning speed (a quadratic pattern takes minutes on 128 KiB).
    from hyport_lib.triage.catalogue import BY_KEY

    size = 128 * 1024
    hostile = ["a" * size + ": hyport attention",
               (": hyport attention (" + "b" * 33) * (size // 54),
               ("x: hyport attention! ") * (size // 21),
               "UnsupportedAttentionArgument" * (size // 28),
               "FlashAttnUnsupported:" * (size // 21),
               "ValueError: hyport attention: " * (size // 30)]
    if not hasattr(signal, "setitimer"):
        pytest.skip("no interval timer on this platform")

    def too_slow(*_):
        # re checks for signals while it matches, so a runaway pattern fails here
        # instead of hanging the suite.
        raise AssertionError("the refusal patterns took more than 2 s on 6 lines of 128 KiB")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        for line in hostile:
            assert recognise(line) is None, line[:60]
            assert not any(rx.search(line) for _, rx in BY_KEY[REFUSED].compiled)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
