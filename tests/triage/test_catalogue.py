"""The catalogue of known NPU failures on real logs.

The logs under ``tests/data/npu_logs/`` were copied from public issue threads (see its
``SOURCES.md``); each row of that file names the catalogue keys its log must produce, so a
new vendored log that no catalogue entry recognises fails here. Those under
``tests/data/hyport_logs/`` are hyport's own output when its attention refuses what a model
asks (see its ``README.md``), read the same way. The patterns stay linear on hostile lines.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import CATALOGUE, recognise, triage
from hyport_lib.utils.redact import scrub_secret_shapes


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
    assert CATALOGUE
    for entry in CATALOGUE:
        assert entry.sources, entry.key
        for name in entry.sources:
            assert entry.key in {f.key for f in triage([_source(name)]).findings}, (entry.key, name)


def test_a_more_specific_entry_wins_over_a_broader_one():
    # The EI0013 line says "HCCL watchdog thread terminated": a link error, not a timeout.
    line = (LOGS / "hccl_link_error.vllm-ascend-7384.log").read_text(encoding="utf-8").splitlines()[1]
    assert recognise(line).key == "hccl_link_error"


def test_the_docs_table_lists_every_catalogue_entry_and_its_examples():
    doc = (Path(__file__).parents[2] / "docs" / "triage.md").read_text(encoding="utf-8")
    assert CATALOGUE
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


def test_a_torchrun_master_port_conflict_is_not_called_an_hccl_port_conflict(tmp_path):
    """L3: "Address already in use" is the rendezvous port; no vendored log ties it to HCCL."""
    log = tmp_path / "torchrun.log"
    log.write_text("torch.distributed.DistNetworkError: The server socket has failed to listen on any "
                   "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
                   "message: address already in use (errno: 98 - Address already in use)\n",
                   encoding="utf-8")
    result = triage([log])
    assert result.findings == [] and result.unrecognised_count == 1


REFUSED = "hyport_attention_refused"


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


def _refusal_of(attn_implementation: str, model_class=None) -> str:
    """The last line of the traceback transformers itself gives on this CPU host when a tiny
    Llama is built (and run) with ``attn_implementation``."""
    import traceback

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    try:
        if model_class is None:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
        else:
            model = model_class(config)
        model(torch.tensor([[1, 2, 3]]))
    except (ImportError, ValueError, NotImplementedError) as exc:
        return traceback.format_exception(exc)[-1].strip()
    raise AssertionError(f"{attn_implementation} ran on this CPU host")


def test_transformers_refusals_of_an_attention_are_recognised_and_the_advice_names_auto(tmp_path, capsys):
    """Each message made for real by the installed transformers (tests/triage runs under 4.57
    too: scripts/test_transformers457.sh)."""
    from transformers import LlamaForCausalLM

    class NoSdpa(LlamaForCausalLM):
        _supports_sdpa = False

        def __init__(self, config):
            config._attn_implementation = "sdpa"  # as attn_implementation="sdpa" sets it
            super().__init__(config)

    lines = [_refusal_of(name) for name in ("flash_attention_2", "flash_attention_3", "flash_attn_2")]
    lines.append(_refusal_of("sdpa", NoSdpa))
    assert lines[0].startswith("ImportError: FlashAttention2 has been toggled on")
    assert "does not support an attention implementation through torch.nn" in lines[-1], lines[-1]
    for line in lines:
        found = recognise(line)
        assert found is not None and found.key == "attention_not_runnable", line
    log = tmp_path / "card0.log"
    log.write_text("\n".join(["[hyport worker] card 0", *lines]) + "\n", encoding="utf-8")
    code, data = _json(capsys, log)
    assert code == 1 and data["unrecognised"] == [] and [f["key"] for f in data["findings"]] == [
        "attention_not_runnable"]
    assert "`attn_implementation=auto`" in data["findings"][0]["action"]
    assert "eager, sdpa, hyport_torch, hyport_npu_emulated" in data["findings"][0]["action"]


def test_the_attention_advice_names_what_each_stage_runs_on_a_cpu():
    """The advice lists what the plans accept on a CPU: flex_attention for 05's reload only."""
    from hyport_lib.npu_attention.runnable import attention_choices

    action = next(e for e in CATALOGUE if e.key == "attention_not_runnable").action
    offered = {name for work in ("load", "generate", "train") for name in attention_choices("cpu", work=work)}
    assert "flex_attention" in offered
    assert [name for name in sorted(offered) if name not in action] == []
    assert "flex_attention in stage 05 (its reload only loads the model)" in action


@pytest.mark.slow  # transformers compiles flex_attention's block mask (a C++ compiler starts)
def test_flex_attention_refused_on_a_cpu_is_recognised():
    line = _refusal_of("flex_attention")
    assert line.startswith("NotImplementedError: FlexAttention does not support backward on CPU"), line
    assert recognise(line).key == "attention_not_runnable"
