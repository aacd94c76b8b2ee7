"""What the compare tables call a difference: a value missing in one run (None, an unreadable
record) is not one, a stage run two different ways is one, and an empty table says what was
compared."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd
import pytest

from hyport_lib.attention import stage as attention_stage
from hyport_lib.attention.compare import BackendInfo
from hyport_lib.attention.stage import AttentionStageResult
from hyport_lib.display import MISSING
from hyport_lib.results import RESULTS_DIR_ENV, RUN_DIR_ENV, Provenance, StageRecord, record, write_record
from hyport_lib.scan.hits import ScanReport
from hyport_lib.stages import none_text
from hyport_lib.train import stage as train_stage
from hyport_lib.train.loss_explorer import loss_spec
from hyport_lib.train.loss_vega import overlay_spec
from hyport_lib.train.result import StepMetrics, TrainResult, summarize_metrics
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.utils.typed_records import from_mapping
from hyport_lib.workbook.compare import compare_runs
from hyport_lib.workbook.compare_show import (comparison_html, headline_table, overview_table, parameter_table,
                                              throughput_table)

A, B = "20990101-000000-aaaaaa", "20990102-000000-bbbbbb"


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """An empty outputs folder (report runs are written into it by each test)."""
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "outputs" / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    return tmp_path / "outputs"


def _results(outputs: Path, run: str) -> Path:
    return outputs / run / "results"


def _train(tokens_s, steps=3):
    metrics = [StepMetrics(step=i + 1, loss=2.0 - i / 10, step_s=0.5, tokens=1000, real_tokens=800)
               for i in range(steps)]
    summary = summarize_metrics(metrics, warmup_steps=0)
    summary.tokens_per_s_per_card = tokens_s
    return TrainResult("ok", 0, 3.0, None, from_mapping(LaunchPlan, {"world_size": 1}), summary, metrics=metrics,
                       provenance=Provenance(device="cpu"))


def _attention(verdicts, dtype="float32"):
    rows = [{"case": f"case{i}", "layout": "BSND", "dtype": dtype, "mask": "causal", "backend": "npu",
             "verdict": v} for i, v in enumerate(verdicts)]
    return AttentionStageResult(rows, [BackendInfo("npu-emulated", emulated=True)], scan=ScanReport("planted"))


def test_a_figure_none_in_one_run_reads_only_in_the_other_not_differs(outputs):
    write_record(StageRecord("01_environment", "PASS", "same", headline={"scan findings": 8, "cards": 2}),
                 _results(outputs, A))
    write_record(StageRecord("01_environment", "PASS", "same", headline={"scan findings": None, "cards": 2}),
                 _results(outputs, B))
    record(train_stage, _train(900.0), directory=_results(outputs, A))
    record(train_stage, _train(None), directory=_results(outputs, B))  # no tokens/s measured
    c = compare_runs([A, B], outputs=outputs)
    a, b = c.runs
    headlines = headline_table(c)
    assert headlines.loc[("01_environment", "scan findings"), "difference"] == f"only in A ({a.title})"
    assert headlines.loc[("01_environment", "scan findings"), B] == MISSING
    assert headlines.loc[("01_environment", "cards"), "difference"] == "same"
    tokens = throughput_table(c)
    assert tokens.loc[("04_train", "tokens/s per card"), "difference"] == f"only in A ({a.title})"
    assert tokens.loc[("04_train", "real tokens/s per card (no padding)"), "difference"] == "same"
    assert "differs" not in set(tokens["difference"])


def test_a_figure_none_in_every_run_that_recorded_it_is_a_row_alike(outputs):
    for run in (A, B):
        write_record(StageRecord("01_environment", "PASS", "same", headline={"scan findings": None}),
                     _results(outputs, run))
    headlines = headline_table(compare_runs([A, B], outputs=outputs))
    assert headlines.loc[("01_environment", "scan findings")].tolist() == [MISSING, MISSING, "same"]


def test_a_stage_recorded_without_a_verdict_keeps_its_row(outputs):
    for run in (A, B):
        write_record(StageRecord("01_environment", "PASS", "ok"), _results(outputs, run))
        (_results(outputs, run) / "03_inference.json").write_text(
            json.dumps({"stage": "03_inference", "verdict": None, "summary": "s", "params": {"a": 1}}))
    table = overview_table(compare_runs([A, B], outputs=outputs))
    assert list(table.index) == ["01_environment", "03_inference"]
    assert table.loc["03_inference", A] == "no verdict: s" and table.loc["03_inference", "difference"] == "same"


def test_a_stage_run_two_different_ways_with_one_verdict_differs(outputs):
    record(attention_stage, _attention(["PASS", "PASS"]), directory=_results(outputs, A))
    record(attention_stage, _attention(["PASS", "PASS", "PASS"], "float16"), directory=_results(outputs, B))
    table = overview_table(compare_runs([A, B], outputs=outputs))
    assert table.loc["02_attention", A].split(":")[0] == table.loc["02_attention", B].split(":")[0] == "PASS"
    assert table.loc["02_attention", "difference"] == "differs"
    record(attention_stage, _attention(["PASS", "PASS"]), directory=_results(outputs, B))  # run alike
    assert overview_table(compare_runs([A, B], outputs=outputs)).loc["02_attention", "difference"] == "same"


def test_an_unreadable_record_reads_unreadable_not_missing(outputs):
    for run in (A, B):
        write_record(StageRecord("01_environment", "PASS", "ok", headline={"cards": 2}), _results(outputs, run))
    (_results(outputs, A) / "01_environment.json").write_text("{half")
    c = compare_runs([A, B], outputs=outputs)
    a = c.runs[0]
    table = overview_table(c)
    assert table.loc["01_environment", "difference"] == f"unreadable in A ({a.title})"
    assert table.loc["01_environment", A] == "unreadable"
    assert headline_table(c).loc[("01_environment", "cards"), "difference"] == f"unreadable in A ({a.title})"
    assert any("01_environment.json is not a result" in note for note in c.notes)


def test_no_differing_case_says_how_many_cases_were_compared(outputs):
    record(attention_stage, _attention(["PASS", "WARN", "PASS"]), directory=_results(outputs, A))
    record(attention_stage, _attention(["PASS", "WARN"]), directory=_results(outputs, B))
    page = comparison_html(compare_runs([A, B], outputs=outputs))
    assert html.escape("no case's verdict differs (2 cases in both)") in page  # case0, case1; case2 only in A
    assert "nothing to compare" not in page


def test_a_parameter_set_to_none_reads_as_the_index_shows_it(outputs):
    write_record(StageRecord("01_environment", "PASS", "ok", params={"num_cards": None}), _results(outputs, A))
    write_record(StageRecord("01_environment", "PASS", "ok", params={"num_cards": 2}), _results(outputs, B))
    table = parameter_table(compare_runs([A, B], outputs=outputs))
    shown = table.loc[("01_environment", "num_cards"), A]
    assert shown == none_text("01_environment", "num_cards") and shown.startswith(f"{MISSING} (all")
    assert table.loc[("01_environment", "num_cards"), "difference"] == "differs"


def test_the_step_axis_ticks_whole_steps():
    """The overlay and the loss explorer: no tick at step 2.5."""
    metrics = _train(9.0).metrics
    losses = pd.DataFrame([{"run": "r", "label": "A", "step": m.step, "loss": m.loss} for m in metrics])
    explorer = loss_spec(metrics)
    x_axes = [overlay_spec(losses)["encoding"]["x"], *(layer["encoding"]["x"] for layer in explorer["layer"])]
    assert len(x_axes) > 1 and all(x["axis"] == {"tickMinStep": 1, "format": "d"} for x in x_axes)
