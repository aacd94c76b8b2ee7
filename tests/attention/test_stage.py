"""Stage 02 as a whole: its summary and record, the planted scan, ``hyport attention``, and,
with ``code_path`` naming real model code, the port and its proof as a stage record, on the
report's index card and in both drafts. The proof runs the code: only with ``port_proof``,
in a child process (so the tests of a proven port are slow)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hyport_lib.attention import compare as C
from hyport_lib.attention import stage
from hyport_lib.attention.implementations import nfa_mapping
from hyport_lib.attention.params import Params
from hyport_lib.attention.show import glance
from hyport_lib.attention.stage import planted_example, run_scan
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.emulation import npu_fusion_attention as emulated
from hyport_lib.port.generated.flash_attn_ascend import compressed_causal_mask
from hyport_lib.report.blog import render_blog
from hyport_lib.report.run import ReportRun, StageOutcome
from hyport_lib.results import read_record, record
from blog_drafts import english_runs, stage_draft, unsourced

from .test_compare import _backend

REMOTE = Path(__file__).parents[1] / "data" / "remote_code"


def test_summary_and_record(tmp_path):
    grid = C.run_comparison(device="cpu", dtypes=["float32"])
    result = stage.AttentionStageResult(**vars(grid), scan=run_scan(""), flash_attn_version="2.7.4.post1")
    record(stage, result, directory=tmp_path)
    summary = stage.summarize(result)
    saved = json.loads((tmp_path / "02_attention.json").read_text())
    assert saved["verdict"] == summary.verdict == "PASS"
    assert saved["provenance"]["emulated"] is True
    assert len(saved["data"]["rows"]) == len(grid.rows)
    assert saved["data"]["scan"]["path"] == saved["data"]["scan"]["root"] == result.scan.root
    assert 0 < summary.headline["worst npu-emulated err/bound"] <= 1


def test_planted_scan():
    report = run_scan("")
    assert report.root.endswith("hyport-planted-example")
    assert report.counts().get("flash_attn", 0) >= 1


def test_cli_writes_json_and_exit_code(tmp_path, monkeypatch, capsys):
    from hyport_lib.commands import main

    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    out = tmp_path / "rows.json"
    rc = main(["attention", "--dtypes", "[float32]", "--model-path", "none", "--json", str(out),
               "--code-path", str(planted_example(tmp_path / "code")), "--port", "false"])
    text = capsys.readouterr().out
    assert rc == 0 and "npu-emulated" in text and "PASS:" in text and "port:" not in text
    payload = json.loads(out.read_text())
    assert payload["verdict"] == "PASS" and {r["dtype"] for r in payload["rows"]} == {"float32"}
    assert (tmp_path / "results" / "02_attention.json").exists()

    real = C.available_implementations

    def with_bug(device="auto", flash_attn_version=None):
        def no_scale(case, data, device):
            calls = nfa_mapping(case, data, device, compressed_causal_mask())
            call = calls[0]
            call.pop("rows")
            call.pop("scale")
            return R.to_bnsd(emulated(**call)[0], case.layout, case.nq)

        return real(device, flash_attn_version) + [_backend("buggy", no_scale)]

    monkeypatch.setattr(C, "available_implementations", with_bug)
    rc = main(["attention", "--dtypes", "[float32]", "--model-path", "none"])
    assert rc == 1 and "FAIL" in capsys.readouterr().out


def test_the_summary_names_the_device_of_each_implementation():
    backends = [C.BackendInfo("eager", device="cuda:0"), C.BackendInfo("sdpa", device="cuda:0"),
                C.BackendInfo("npu-emulated", device="cpu"), C.BackendInfo("flash-api (npu-emulated)", device="cpu")]
    assert stage.where_each_ran(backends) == "eager, sdpa on CUDA; npu-emulated, flash-api (npu-emulated) on CPU"


@pytest.fixture(scope="module")
def ported_stage(tmp_path_factory):
    """Stage 02 (a float32 grid, no model check) with the Ovis vision tower as code_path,
    its port proven (in a child process)."""
    results = tmp_path_factory.mktemp("run") / "results"
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    try:
        params = Params(code_path=str(REMOTE / "ovis_siglip2_navit"), model_path=None,
                        dtypes=["float32"], port_proof=True,
                        port_proof_config={"fullatt_block_indexes": "1"})
        plan = stage.plan(params)
        assert plan.port_out is not None and not plan.port_out.exists()  # a plan writes nothing
        result = stage.run(plan)
        path = record(stage, result)
    finally:
        monkeypatch.undo()
    return result, json.loads(path.read_text()), results.parent


@pytest.mark.slow
def test_the_port_and_its_proof_are_recorded(ported_stage):
    result, record, run_dir = ported_stage
    port = record["data"]["port"]
    assert port["proof"]["verdict"] == "PASS" and port["proof"]["emulated"] is True
    assert all(case["npu_calls"] > 0 for case in port["proof"]["cases"])
    assert Path(port["dst"]).parent == run_dir / "ports"
    assert (Path(port["dst"]) / "port.json").is_file() and (Path(port["dst"]) / "port.diff").is_file()
    assert record["headline"]["port proof"] == "PASS (emulated)"
    assert record["headline"]["port changes"] == len(port["changes"]) == 2
    assert "proof PASS (NPU path emulated on CPU)" in record["summary"]
    assert ("port", "2 changes, 0 left for a human, proof PASS (emulated)") in glance(read_record(record, stage.RESULT))


@pytest.mark.slow
def test_a_failed_proof_fails_the_stage(ported_stage):
    result, _, _ = ported_stage
    result.port.proof = dataclasses.replace(result.port.proof, verdict="FAIL")
    try:
        assert stage.summarize(result).verdict == "FAIL"
    finally:
        result.port.proof = dataclasses.replace(result.port.proof, verdict="PASS")


@pytest.mark.slow
def test_both_drafts_tell_the_port_and_the_proof(ported_stage, tmp_path):
    _, record, _ = ported_stage
    run = ReportRun(run_id="20300101-000000-abcdef", run_dir=tmp_path, profile=None,
                    parameters={"device": "cpu"},
                    stages=[StageOutcome(stage="02_attention", verdict=record["verdict"])],
                    versions={"python": "3.11.7"}, started="2030-01-01T00:00:00",
                    status="finished", host="testhost")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "02_attention.json").write_text(json.dumps(record))
    (tmp_path / "run.json").write_text(json.dumps(run.to_dict(), default=str))
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert "made by `hyport port` on a copy of the code: 2 change(s) in 1 file(s)" in en
    assert "Verdict: `PASS`" in en and "emulated, not an NPU result" in en
    assert "`hyport port` 在代码副本上共做了 2 处修改" in zh and "并非 NPU 实测" in zh
    for draft in (en, zh):
        assert "`one image`" in draft and "`two images packed`" in draft
        assert not unsourced(draft, tmp_path)
    assert not english_runs(zh)


def test_a_port_that_cannot_be_made_is_said(tmp_path):
    record = {"data": {"port_error": "hyport port: --out '/x' exists and is not an empty folder"}}
    lines = stage_draft(tmp_path, "02_attention", record["data"]).splitlines()
    assert "The port of the code could not be made:" in lines
    assert any("not an empty folder" in line for line in lines)
    assert ("port", "not made: hyport port: --out '/x' exists and is not an empty folder") in \
        glance(read_record(record, stage.RESULT))


def test_without_port_proof_the_code_is_ported_and_the_record_says_why_it_is_not_proven(
        tmp_path, monkeypatch, capsys):
    from hyport_lib.commands import main

    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    rc = main(["attention", "--dtypes", "[float32]", "--model-path", "none",
               "--code-path", str(planted_example(tmp_path / "code"))])
    text = capsys.readouterr().out
    assert rc == 0 and "PASS:" in text  # not proven is not a failure: it was not asked for
    assert "port: " in text and "6 changes" in text and "proof SKIP" in text
    record = json.loads((tmp_path / "results" / "02_attention.json").read_text())
    proof = record["data"]["port"]["proof"]
    assert record["verdict"] == "PASS" and proof["verdict"] == "SKIP"
    assert proof["error"].startswith("not run: the proof imports and runs your model code (SRC: ")
    assert proof["error"].endswith("; set port_proof=true to run it in a child process")
    assert record["headline"]["port proof"] == "SKIP"
    assert not list((tmp_path / "code").glob("flash_attn_ascend.py"))  # SRC untouched


def _stage(tmp_path, monkeypatch, code_path, **params):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    plan = stage.plan(Params(code_path=str(code_path), model_path=None, dtypes=["float32"], **params))
    return plan, stage.run(plan)


def test_a_port_that_cannot_be_written_keeps_the_grid_and_says_why(tmp_path, monkeypatch):
    (tmp_path / "ports").write_text("a file where the ports folder goes\n")
    plan, result = _stage(tmp_path, monkeypatch, REMOTE / "ovis_siglip2_navit")
    assert result.port is None and "which is not a folder" in result.port_error
    summary = stage.summarize(result)
    assert summary.verdict == "FAIL" and "port not made: --out " in summary.summary
    assert result.rows  # the grid's results are kept


def test_code_with_nothing_to_rewrite_gets_no_proof(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "modeling_clean.py").write_text("import torch\n\ndef f(x):\n    return x * 2\n")
    _, result = _stage(tmp_path, monkeypatch, code)
    assert result.port is not None and result.port.changes == [] and result.port.proof is None
    summary = stage.summarize(result)
    assert summary.verdict == "PASS" and "port: nothing to rewrite" in summary.summary


def test_a_bad_proof_config_is_one_line():
    from hyport_lib.params import ParameterError

    with pytest.raises(ParameterError, match="port_proof_config"):
        Params(port_proof_config={1: 2}).check()


#: Remote code that reads rope_scaling["type"], with the config transformers 5 fills in
#: (key "rope_type"): the tiny build stops with the issue's bare ``KeyError: 'type'``.
OLD_ROPE_MODEL = '''\
import torch
from flash_attn import flash_attn_func
from transformers import PretrainedConfig, PreTrainedModel


class RopeConfig(PretrainedConfig):
    model_type = "rope_type_reader"

    def __init__(self, vocab_size=64, hidden_size=32, rope_scaling=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.rope_scaling = rope_scaling or {"rope_type": "default", "rope_theta": 10000.0}


class RopeForCausalLM(PreTrainedModel):
    config_class = RopeConfig

    def __init__(self, config):
        super().__init__(config)
        self.kind = config.rope_scaling["type"]
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        x = self.embed(input_ids).view(*input_ids.shape, 2, -1)
        return (flash_attn_func(x, x, x, causal=True).flatten(2),)
'''


@pytest.mark.slow
def test_a_config_the_proof_cannot_build_names_port_proof_config_with_the_value(
        tmp_path, monkeypatch):
    """Notebook 02's port section and the record say which parameter fixes the proof."""
    from hyport_lib.attention.views import proof_markdown

    code = tmp_path / "code"
    code.mkdir()
    (code / "modeling_rope.py").write_text(OLD_ROPE_MODEL)
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    plan = stage.plan(Params(code_path=str(code), model_path=None, dtypes=["float32"], port_proof=True))
    port, error = stage.port_and_prove(plan)
    assert error == "" and port.proof.verdict == "FAIL"
    said = port.proof.error
    assert said.startswith("the tiny model could not be built from your config (KeyError: 'type' at "
                           "original modeling_rope.py:")
    assert said.endswith("; set port_proof_config to override the config fields the build needs, "
                         "e.g. port_proof_config={'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}")
    assert said in proof_markdown(port.proof)
    recorded = json.loads((Path(port.dst) / "port.json").read_text())
    assert recorded["proof"]["error"] == said


@pytest.mark.slow
def test_the_stage_names_each_step_as_it_starts(tmp_path):
    # Notebook 02 used to show nothing for its half minute: the grid's cases are counted,
    # then each later step is named as it starts.
    from hyport_lib.attention.show import step_line

    seen = []
    result = stage.run(stage.plan(Params(device="cpu", dtypes=["float32"], model_path=None)),
                       on_progress=seen.append)
    grid = [p for p in seen if p.step == stage.GRID_STEP]
    assert [p.done for p in grid] == list(range(1, result.cases + 1))
    later = [p.step for p in seen if p.step != stage.GRID_STEP]
    assert later == ["scan: CUDA-only constructs in the code"]  # no model check, no port asked
    assert step_line(grid[-1]) == f"grid: {result.cases}/{result.cases} cases"
    assert step_line(seen[-1]).endswith("scan: CUDA-only constructs in the code …")


def test_the_port_proof_is_announced_before_its_child_starts(tmp_path, monkeypatch):
    # A stop asked while the code is ported is taken there, not after the proof's minutes.
    steps, proved = [], []

    class NotStarted(Exception):
        """The proof's child is not started here."""

    def proof_child(src, dst, **options):
        proved.append(list(steps))
        raise NotStarted

    monkeypatch.setattr(stage, "prove_port_in_child", proof_child)
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    plan = stage.plan(Params(code_path=str(planted_example(tmp_path / "code")), model_path=None,
                             dtypes=["float32"], port_proof=True, port_proof_timeout_s=90))
    with pytest.raises(NotStarted):
        stage.port_and_prove(plan, steps.append)
    assert proved == [["port proof: the ported code on a tiny model, in a child process (at most 90 s)"]]
