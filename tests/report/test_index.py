"""The index page (hyport_lib/report/index.py) on planted runs: its at-a-glance cards, the
stages table, the parameters each stage ran with.

Each stage draws its own card (``hyport_lib.<name>.show.glance``); the report lays the
cards out and gives a stage without one its recorded headline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hyport_lib.attention import show as attention_show
from hyport_lib.attention.views import backend_rows
from hyport_lib.drafting.values import fmt_value, num
from hyport_lib.report.index import card_figures, render_index
from hyport_lib.report.run import NOT_RUN, ReportRun, StageOutcome, StageView
from hyport_lib.stages import read_stage_record
from hyport_lib.train import show as train_show
from hyport_lib.weights import show as weights_show


def _view(stage: str, verdict: str, raw: dict) -> StageView:
    """The stage as the report reads it from a result file holding ``raw``."""
    return StageView(StageOutcome(stage, verdict), raw, read_stage_record(stage, raw))


def _run(tmp_path: Path, verdicts: dict) -> ReportRun:
    stages = [StageOutcome(stage=s, verdict=v) for s, v in verdicts.items()]
    return ReportRun(run_id="20300101-000000-abcdef", run_dir=tmp_path, profile=None, parameters={},
                     stages=stages, versions={}, started="2030-01-01T00:00:00", status="finished",
                     host="testhost")


def _card(index: str, stage: str) -> str:
    return dict(re.findall(r'<div class="card" id="glance-([^"]+)">(.*?)</div></div>', index, re.S))[stage]


def test_a_failed_training_shows_dashes_not_none():
    record = {"headline": {"exit code": 1, "steps": 0, "loss first → last": None, "tokens/s/p": None,
                           "total s": 12.3}, "data": {}}
    found = dict(card_figures(_view("04_train", "FAIL", record)))
    assert found == dict(train_show.glance(read_stage_record("04_train", record)))  # the stage's own card
    assert found["loss first → last"] == "—" and found["tokens/s/p"] == "—" and found["exit code"] == "1"


def test_a_stage_without_a_card_of_its_own_shows_its_headline_and_an_odd_record_says_so(monkeypatch):
    monkeypatch.delattr(weights_show, "glance")  # a show module that draws no card
    plain = _view("05_weights", "PASS", {"headline": {"level": 7, "ratio": 0.123456}})
    assert card_figures(plain) == [("level", "7"), ("ratio", "0.1235")]
    # an odd value reads as the field's default: the card still counts what it can
    odd = _view("02_attention", "PASS", {"data": {"rows": [{"case": "a", "max_abs": 1.0, "bound": "tight"}]}})
    assert dict(card_figures(odd)) == {"cases passed": "0 / 1 (1 results)"}

    def broken(record):  # a card the record trips up: said in place of its figures
        return [("cases", record.data.rows[0]["max_abs"] / record.data.rows[0]["bound"])]

    monkeypatch.setattr(attention_show, "glance", broken)
    [(name, why)] = card_figures(odd)
    assert name == "(figures unreadable)" and why.startswith("TypeError")
    assert card_figures(StageView(StageOutcome("05_weights", "PENDING"))) == []


def test_the_stages_table_shows_dashes_and_large_figures_in_full(tmp_path):
    """The table under the cards formats a failed run's headline as the cards do."""
    headline = {"exit code": 1, "train_loss": None, "total s": 12345.678}
    run = _run(tmp_path, {"04_train": "FAIL"})
    run.stages[0].headline = headline  # what the runner copies from the stage's result
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "04_train.json").write_text(json.dumps({
        "stage": "04_train", "verdict": "FAIL", "summary": "stopped", "headline": headline, "data": {}}))
    index = render_index(run)
    assert "None" not in index and "e+0" not in index
    assert "train_loss: <b>—</b>" in index and "total s: <b>12,345.7</b>" in index
    assert fmt_value(23456.789) == "23,456.8" == num(23456.789)  # cards and drafts alike
    assert fmt_value(0.123456) == "0.1235" == num(0.123456)


def test_attention_counts_cases_not_rows():
    rows = [{"case": "a", "backend": b, "verdict": "PASS", "max_abs": 0.1, "bound": 1.0} for b in "xyz"]
    rows += [{"case": "b", "backend": "x", "verdict": "PASS", "max_abs": 0.5, "bound": 1.0},
             {"case": "b", "backend": "y", "verdict": "FAIL", "max_abs": 2.0, "bound": 1.0}]
    found = dict(attention_show.glance(read_stage_record("02_attention", {"data": {"rows": rows}})))
    assert found["cases passed"] == "1 / 2 (5 results)"
    assert found["worst case"] == "b on y: error 2 of the bound"


def test_a_non_finite_attention_output_is_the_worst_case_even_as_json_null():
    from hyport_lib.utils.files import dumps_json

    rows = [{"case": "c1", "backend": "npu", "max_abs": float("inf"), "bound": 1e-3, "verdict": "FAIL",
             "finite": False},
            {"case": "c2", "backend": "npu", "max_abs": 5e-4, "bound": 1e-3, "verdict": "PASS", "finite": True}]
    written = json.loads(dumps_json({"data": {"rows": rows}}))
    assert written["data"]["rows"][0]["max_abs"] is None  # strict JSON: no Infinity
    read = read_stage_record("02_attention", written)
    found = dict(attention_show.glance(read))
    assert found["worst case"] == "c1 on npu: non-finite output"
    [npu] = backend_rows(read.data.frame())
    assert npu["ratio"] == float("inf") and npu["FAIL"] == 1


def test_the_weights_card_says_when_the_trained_weights_were_not_checked():
    fallback = {"headline": {"shards": 2, "LOAD_OK": True, "errors": 0, "warnings": 0},
                "data": {"source": "no stage 04 result in /x/results: the embedded tiny model ..."}}
    found = dict(weights_show.glance(read_stage_record("05_weights", fallback)))
    assert found["checked"] == "the embedded tiny model (no weights from stage 04 in this run)"
    assert found["LOAD_OK"] == "yes" and found["findings"] == "0 errors, 0 warnings"
    trained = {"headline": {}, "data": {"source": "stage 04 of this run (/r/04_train.json): ..."}}
    card = dict(weights_show.glance(read_stage_record("05_weights", trained)))
    assert card["checked"] == "stage 04's final weights" and card["LOAD_OK"] == "not reloaded"


def test_a_stage_that_did_not_run_says_so_on_its_card(tmp_path):
    run = _run(tmp_path, {"01_environment": "FAIL", "02_attention": NOT_RUN})
    run.stages[0].error = "RuntimeError: planted"
    index = render_index(run)
    assert "RuntimeError: planted" in _card(index, "01_environment")
    assert "did not run: the run stopped before this stage" in _card(index, "02_attention")


def test_the_parameters_are_every_stages_effective_values_with_paths_in_the_run(tmp_path):
    """Not only the overrides: each stage's every parameter, where it came from, the stages
    that ran with it; a path under the run folder relative to it; the profile by its name."""
    from hyport_lib.report.paths import default_profiles_dir

    run = _run(tmp_path, {"03_inference": "PASS", "04_train": "PASS"})
    run.profile = str(default_profiles_dir() / "default.yaml")
    run.parameter_sources = {"device": "profile", "max_steps": "-p"}
    run.stages[0].parameters = {"device": "cpu", "model_path": "tiny", "attn_implementation": "auto",
                                "image": None}
    run.stages[1].parameters = {"device": "cpu", "model_path": "tiny", "attn_implementation": "eager",
                                "max_steps": 7, "output_dir": str(tmp_path / "train" / "smoke")}
    index = render_index(run)
    table = index[index.index('id="parameters"'):]
    rows = re.findall(r"<tr( class=\"given\")?><td><code>([^<]*)</code></td><td><code>([^<]*)</code></td>"
                      r"<td>([^<]*)</td><td>([^<]*)</td></tr>", table)
    assert ("", "model_path", "&quot;tiny&quot;", "default", "03_inference, 04_train") in rows
    assert (' class="given"', "device", "&quot;cpu&quot;", "profile", "03_inference, 04_train") in rows
    assert (' class="given"', "max_steps", "7", "-p", "04_train") in rows
    assert ("", "attn_implementation", "&quot;auto&quot;", "default", "03_inference") in rows
    assert ("", "attn_implementation", "&quot;eager&quot;", "default", "04_train") in rows
    assert ("", "output_dir", "&quot;&lt;run&gt;/train/smoke&quot;", "default", "04_train") in rows
    # None as "–" and what the stage then does, from the parameter's doc
    assert ("", "image", "– (the built-in sample picture)", "default", "03_inference") in rows
    assert "null" not in table
    run.stages[0].parameters = run.stages[1].parameters = {}  # a run.json from before they were recorded
    run.parameters = {"log_dir": None}
    assert "<code>log_dir</code></td><td><code>– (the stage decides)</code>" in render_index(run)
    assert str(tmp_path) not in index
    assert "· profile default</p>" in index
    run.profile = "/somewhere/private/mine.yaml"
    assert "· profile …/mine.yaml</p>" in render_index(run) and "/somewhere" not in render_index(run)


def test_a_stage_draws_its_own_svg_on_its_card_and_odd_metrics_do_not_break_the_index(tmp_path):
    run = _run(tmp_path, {"01_environment": "PASS", "04_train": "PASS"})
    (tmp_path / "results").mkdir()
    metrics = [{"step": i, "loss": 3.0 - 0.5 * i} for i in range(1, 4)]
    (tmp_path / "results" / "04_train.json").write_text(json.dumps(
        {"stage": "04_train", "verdict": "PASS", "headline": {"steps": 3}, "data": {"metrics": metrics}}))
    index = render_index(run)
    assert '<svg class="spark"' in _card(index, "04_train") and "loss 2.5 → 1.5 over steps 1–3" in index
    assert "<svg" not in _card(index, "01_environment")
    (tmp_path / "results" / "04_train.json").write_text(json.dumps(
        {"stage": "04_train", "verdict": "PASS", "headline": {"steps": 3}, "data": {"metrics": [1, "x"]}}))
    assert "<svg" not in _card(render_index(run), "04_train")


def test_the_inference_card_names_the_attention_and_what_a_card_answered():
    from hyport_lib.inference import show as inference_show
    from hyport_lib.models.tiny import ensure_tiny_model

    record = {"headline": {"cards ok": "2/2", "consistent": True},
              "data": {"config": {"attn_implementation": "hyport_npu_fused", "model_path": "/models/real"},
                       "outputs": {"0": {"single": "The capital of France is Paris. " * 10, "batch": []}}}}
    rows = dict(inference_show.glance(read_stage_record("03_inference", record)))
    assert rows["attention"] == "hyport_npu_fused"
    assert rows["card 0 answered"].startswith("The capital of France is Paris.")
    assert len(rows["card 0 answered"]) <= inference_show.GLANCE_ANSWER_CHARS
    record["data"]["config"]["model_path"] = str(ensure_tiny_model())
    assert dict(inference_show.glance(read_stage_record("03_inference", record)))["card 0 answered"] == \
        "random weights: only shows the cards agree"


def test_the_index_links_its_compare_page_near_the_top_when_one_was_written(tmp_path):
    run = _run(tmp_path, {"01_environment": "PASS"})
    assert "compare.html" not in render_index(run, [])
    (tmp_path / "compare.html").write_text("<html></html>")  # what report --compare writes
    index = render_index(run, [])
    assert index.count('<a href="compare.html">') == 1
    assert index.index('href="compare.html"') < index.index("<h2>Stages</h2>")  # above the stages
