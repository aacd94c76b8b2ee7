"""A triage of logs: findings and their places, causes before the timeouts they caused,
error lines nothing explains, warnings, secrets and terminal escapes kept out of what is
shown, the deadline, and a diagnosis that never costs a stage its result."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from hyport_lib.commands import main
from hyport_lib.triage import Triage, scan, triage, triage_markdown, triage_text
from hyport_lib.triage.scan import is_error_line
from hyport_lib.utils.redact import PrivateKeyLines, REDACTED, scrub_secret_shapes

from .test_catalogue import REFUSED, _cli
from .test_log_files import _cann_folder, _rank_log


LOGS = Path(__file__).parents[1] / "data" / "npu_logs"


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


def test_secrets_of_the_given_environment_are_scrubbed(tmp_path, monkeypatch):
    """L7: the failed job's environment (a stage's extra_env) may hold a token this process lacks."""
    monkeypatch.delenv("JOB_API_KEY", raising=False)
    secret = "zq-7f3a9c11-private"
    log = tmp_path / "card0.log"
    log.write_text(f"ERROR upload to bucket {secret} failed\n", encoding="utf-8")
    assert secret in json.dumps(triage([log]).to_dict())  # nothing says it is a secret...
    scrubbed = triage([log], environ={"JOB_API_KEY": secret})  # ...unless the job's env does
    assert secret not in json.dumps(scrubbed.to_dict()) and "[redacted]" in scrubbed.unrecognised[0].lines[0][1]


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


OOM = "RuntimeError: NPU out of memory. Tried to allocate 1 GiB"


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
    assert left == "time limit of 10 s reached: 2 log files not read: b.log, c.log"
    monkeypatch.undo()
    assert triage([logs], max_seconds=None).unread == 0
    for bad in (0, -1, True, "5"):
        try:
            triage([logs], max_seconds=bad)
        except ValueError as exc:
            assert str(exc).startswith(f"max_seconds={bad!r}: expected a positive number")
        else:
            raise AssertionError(f"max_seconds={bad!r} accepted")


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


def test_a_diagnosis_that_cannot_read_the_logs_is_a_note_not_a_lost_result(tmp_path, monkeypatch):
    def unreadable(*args, **kwargs):
        raise PermissionError("permission denied: plog")

    monkeypatch.setattr(scan, "triage", unreadable)
    found = Triage.from_dict(scan.diagnose([tmp_path], cann_dir=None, since=0.0))
    assert not found.findings and "PermissionError: permission denied: plog" in found.notes[0]
