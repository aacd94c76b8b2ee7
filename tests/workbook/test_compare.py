"""Comparing recorded runs: records written by the real writer (:func:`hyport_lib.results.record`
of the stages' results), into the interactive history and into report run folders, read back
side by side."""

from __future__ import annotations

import datetime as dt
import html
import os
import re
import time
from pathlib import Path

import pytest

from hyport_lib.attention import stage as attention_stage
from hyport_lib.attention.compare import BackendInfo
from hyport_lib.attention.stage import AttentionStageResult
from hyport_lib.inference import stage as inference_stage
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.inference.grid import COLUMNS, GridResult
from hyport_lib.results import RESULTS_DIR_ENV, RUN_DIR_ENV, Provenance, history_dir, read_result, record
from hyport_lib.scan.hits import ScanReport
from hyport_lib.train import stage as train_stage
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import StepMetrics, TrainResult, summarize_metrics
from hyport_lib.commands import main
from hyport_lib.utils.typed_records import from_mapping
from hyport_lib.workbook import compare_show
from hyport_lib.report.run import new_run_dir
from hyport_lib.display import MISSING, VEGA_LITE_MIME
from hyport_lib.workbook.compare import compare_runs, find_run, list_runs
from hyport_lib.workbook.compare_show import (COMPARE_PAGE, comparison_html, headline_table, overview_table,
                                              parameter_table, run_picker, show_comparison, throughput_table)

CPU = Provenance(device="cpu")
NPU = Provenance(device="npu")


def _train(losses, provenance, tokens_s):
    metrics = [StepMetrics(step=i + 1, loss=loss, step_s=0.5, tokens=1000, real_tokens=800)
               for i, loss in enumerate(losses)]
    summary = summarize_metrics(metrics, warmup_steps=0)
    summary.tokens_per_s_per_card = tokens_s
    return TrainResult("ok", 0, 3.0, None, from_mapping(LaunchPlan, {"world_size": 1}), summary, metrics=metrics,
                       provenance=provenance)


def _grid(statuses, hashes, tokens_s, provenance, tmp_path):
    rows = [{**{c: None for c in COLUMNS}, "card": card, "device": f"{provenance.device}:{card}",
             "status": status, "output_hash": digest, "tokens_per_s": tokens_s, "decode_tokens_per_s": tokens_s * 2}
            for card, (status, digest) in enumerate(zip(statuses, hashes))]
    return GridResult(rows, len(set(hashes)) == 1, [], tmp_path, 1.0, provenance=provenance)


def _attention_result(rows, provenance) -> AttentionStageResult:
    """Stage 02's result with ``rows``; ``provenance`` says where the backends ran."""
    backends = [BackendInfo("npu" if provenance.device == "npu" else "npu-emulated", device=provenance.device,
                            emulated=provenance.device != "npu")]
    return AttentionStageResult(rows, backends, scan=ScanReport("planted"))


def _attention(verdicts, provenance, **where):
    rows = [{"case": f"case{i}", "layout": "BSND", "dtype": "float32", "mask": "causal", "backend": "npu",
             "verdict": v} for i, v in enumerate(verdicts)]
    return record(attention_stage, _attention_result(rows, provenance), **where)


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """``outputs/`` with an interactive CPU run of 04 (and one of 02), and a report run
    folder on the NPU with 02, 03 and 04."""
    root = tmp_path / "outputs"
    monkeypatch.setenv(RESULTS_DIR_ENV, str(root / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    record(train_stage, _train([2.0, 1.5, 1.2], CPU, 50.0), params=TrainParams(max_steps=3))
    _attention(["PASS", "PASS", "FAIL"], CPU)
    report = root / "20990101-000000-npu" / "results"
    # output_dir inside the report run folder, as the report makes a relative one absolute
    record(train_stage, _train([2.0, 1.4, 1.0, 0.9], NPU, 900.0), directory=report,
                       params=TrainParams(max_steps=4, output_dir=str(report.parent / "train" / "smoke")))
    _attention(["PASS", "WARN"], NPU, directory=report)
    record(inference_stage, _grid(["ok", "ok"], ["aa", "bb"], 30.0, NPU, tmp_path), directory=report,
                           params=InferenceParams())
    return root


def test_runs_are_listed_from_the_history_and_the_report_folders(outputs):
    runs = list_runs(outputs)
    assert [r.kind for r in runs] == ["report", "interactive", "interactive"]  # newest first
    assert runs[0].id == "20990101-000000-npu" and runs[0].stages == ("02_attention", "03_inference", "04_train")
    assert {r.stages for r in runs[1:]} == {("02_attention",), ("04_train",)}
    assert all(r.folder.parent == history_dir() for r in runs[1:])
    # by id, by the start of one, by folder (the run, its results, a history folder)
    assert find_run("20990101", outputs) == runs[0]
    assert find_run(outputs / "20990101-000000-npu", outputs).folder == runs[0].folder
    assert find_run(runs[0].folder).id == runs[0].id
    assert find_run(runs[1].folder) == runs[1]


def test_a_run_that_is_not_there_is_named_with_the_runs_there_are(outputs, tmp_path):
    with pytest.raises(ValueError, match=r"run 'nope': no such run folder or run id under .*runs: 20990101-000000-npu"):
        find_run("nope", outputs)
    with pytest.raises(ValueError, match="matches several runs"):
        find_run("2", outputs)  # every id starts with its year
    with pytest.raises(ValueError, match="holds no stage result"):
        find_run(tmp_path)
    with pytest.raises(ValueError, match="name two runs"):
        compare_runs(["20990101"], outputs=outputs)


def _cpu_train(outputs):
    return next(r for r in list_runs(outputs) if r.kind == "interactive" and "04_train" in r.stages)


def test_loss_curves_overlaid_and_tokens_side_by_side_with_their_provenance(outputs):
    cpu = _cpu_train(outputs)
    c = compare_runs([cpu.id, "20990101-000000-npu"], stages=["04_train"], outputs=outputs)
    assert c.stages == ["04_train"] and c.notes == []
    losses = c.part("losses").frame
    by_run = losses.groupby("run")["loss"].apply(list).to_dict()
    assert by_run == {cpu.id: [2.0, 1.5, 1.2], "20990101-000000-npu": [2.0, 1.4, 1.0, 0.9]}
    labels = dict(zip(losses["run"], losses["label"]))
    assert "CPU (not an NPU measurement)" in labels[cpu.id] and labels["20990101-000000-npu"].endswith("(NPU)")
    per_card = c.throughput[c.throughput["measure"] == "tokens/s per card"]
    assert dict(zip(per_card["run"], per_card["tokens_per_s"])) == {cpu.id: 50.0, "20990101-000000-npu": 900.0}
    verdicts = c.overview.set_index("run")["verdict"].to_dict()
    assert verdicts == {r.id: read_result(r.folder / "04_train.json")["verdict"] for r in c.runs}
    steps = c.headlines[c.headlines["key"] == "steps"].set_index("run")["value"].to_dict()
    assert steps == {cpu.id: 3, "20990101-000000-npu": 4}


def test_attention_cases_whose_verdict_differs_and_the_cards_side_by_side(outputs):
    cpu_attention = next(r for r in list_runs(outputs) if r.stages == ("02_attention",))
    c = compare_runs([cpu_attention, "20990101"], outputs=outputs)
    # case0 PASS in both: not listed; case1 PASS vs WARN; case2 only in the CPU run: apart
    diff = c.part("attention").frame.set_index("case")
    assert list(diff.index) == ["case1"]
    assert diff.loc["case1", cpu_attention.id] == "PASS" and diff.loc["case1", "20990101-000000-npu"] == "WARN"
    only = c.part("attention_only").frame
    assert only[["case", "verdict"]].values.tolist() == [["case2", "FAIL"]]
    assert only["in"].tolist() == [f"only in A ({c.runs[0].title})"] and c.runs[0].id == cpu_attention.id
    # the stages only one run has are said, and still shown for the run that has them
    assert f"run {cpu_attention.id} has no 03_inference result" in c.notes
    cards = c.part("cards").frame
    assert list(cards.index) == [0, 1] and cards.loc[0, "20990101-000000-npu status"] == "ok"
    assert not any(col.startswith(cpu_attention.id) for col in cards.columns)
    # two cards, two answers: card 0 holds the reference (tie: the lowest card), card 1 differs
    assert cards["20990101-000000-npu agrees"].tolist() == [True, False]
    assert cards["same output"].tolist() == [None, None]  # one run has cards: nothing to compare across runs


def test_a_stage_or_figure_only_one_run_has_reads_only_in_that_run_never_differs(outputs):
    """The CPU run has 04 only, the report run 02, 03 and 04: 02 and 03 are the report run's
    alone; the rows that differ are 04's, which both have."""
    c = compare_runs([_cpu_train(outputs), "20990101"], outputs=outputs)
    a, b = c.runs
    assert (a.letter, b.letter) == ("A", "B") and b.title == "smoke · report 02 03 04 · 2099-01-01 00:00:00"
    only_b = f"only in B ({b.title})"
    verdicts = overview_table(c)["difference"].to_dict()
    # 04: one verdict, but 3 steps in A, 4 in B: the summaries differ
    assert verdicts == {"02_attention": only_b, "03_inference": only_b, "04_train": "differs"}
    headlines = headline_table(c)
    assert "differs" not in headlines.columns
    by_stage = headlines.reset_index().groupby("stage")["difference"].apply(set).to_dict()
    assert by_stage["02_attention"] == by_stage["03_inference"] == {only_b}
    assert by_stage["04_train"] <= {"differs", "same"} and "differs" in by_stage["04_train"]  # 3 vs 4 steps
    differing = headlines[headlines["difference"] == "differs"]
    assert len(differing) and (differing[[a.id, b.id]] != MISSING).all().all()  # both runs have them
    tokens = throughput_table(c)["difference"].to_dict()
    assert tokens[("04_train", "tokens/s per card")] == "differs"
    assert {tokens[k] for k in tokens if k[0] == "03_inference"} == {only_b}
    assert not any(stage != "04_train" for stage, _ in parameter_table(c).index)
    # the page's headers name the runs as the runs list does
    page = comparison_html(c)
    assert page.count(f'class="col_heading level0 col0" >A ({html.escape(a.title)})</th>') >= 3
    assert f"A: {html.escape(a.title)}, run {a.id}" in page and "hyport compare: A (" in page
    assert html.escape(only_b) in page and "differs</th>" not in page


def test_the_same_card_answering_alike_in_two_runs_is_said(outputs, tmp_path):
    other = outputs / "20990102-000000-npu" / "results"
    record(inference_stage, _grid(["ok", "failed"], ["aa", None], 31.0, NPU, tmp_path), directory=other)
    cards = compare_runs(["20990101", "20990102"], outputs=outputs).part("cards").frame
    assert cards["same output"].tolist() == [True, False]
    assert cards["20990102-000000-npu status"].tolist() == ["ok", "failed"]
    assert cards["20990102-000000-npu tokens/s"].tolist()[0] == 31.0


def test_an_unreadable_record_is_a_note_not_a_traceback(outputs):
    report = Path(outputs / "20990101-000000-npu" / "results" / "03_inference.json")
    report.write_text("{half")
    c = compare_runs([_cpu_train(outputs), "20990101"], outputs=outputs)
    assert any("03_inference.json is not a result" in n for n in c.notes)
    assert c.part("cards") is None


# ------------------------------------------------------------------ front ends
def test_the_compare_command_writes_one_offline_page_into_the_run_folder(outputs, capsys):
    cpu = _cpu_train(outputs)
    assert main(["compare", str(outputs / "20990101-000000-npu"), cpu.id, "--outputs", str(outputs)]) == 0
    page = outputs / "20990101-000000-npu" / COMPARE_PAGE
    text = page.read_text()
    # offline, static (the picture's base64 left out: its letters may spell "http" by chance)
    bare = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text).replace("http-equiv", "")
    assert "<script" not in bare and "http" not in bare
    assert f"{cpu.id} (interactive run, 04_train): CPU (not an NPU measurement)" in text
    assert "20990101-000000-npu (report run, 02_attention, 03_inference, 04_train): NPU<" in text
    assert text.count("data:image/png;base64,") == 1  # the overlaid loss
    assert "Tokens/s side by side" in text and "900.0" in text
    assert f"compare page: {page}" in capsys.readouterr().out
    assert not list(page.parent.glob("*.tmp*"))


def test_the_compare_command_lists_runs_and_names_a_missing_one(outputs, capsys):
    assert main(["compare", "--list", "--outputs", str(outputs)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in listed] == ["report", "interactive", "interactive"]
    assert main(["compare", "20990101", "nope", "--outputs", str(outputs)]) == 2
    assert "run 'nope': no such run folder or run id" in capsys.readouterr().err


def test_the_loss_figure_names_every_run_with_its_provenance(outputs):
    fig = compare_runs([_cpu_train(outputs), "20990101"], stages=["04_train"], outputs=outputs).part("losses").figure()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(legend) == 2 and any("CPU (not an NPU measurement)" in t for t in legend)
    assert "1 of 2 not NPU measurements" in fig.axes[0].get_title()


def test_the_run_picker_offers_the_runs_and_shows_a_bad_pair_as_one_line(outputs):
    picker = run_picker(outputs)
    first, second, (button, _) = picker.children[0], picker.children[1], picker.children[2].children
    assert [value for _, value in first.options] == [r.id for r in list_runs(outputs)]
    second.value = first.value  # the same run twice
    button.click()
    assert "the same run twice" in picker.children[3].value


def test_the_run_picker_names_each_run_with_its_name_time_and_verdicts_newest_first(outputs):
    labels = [label for label, _ in run_picker(outputs).children[0].options]
    cpu = _cpu_train(outputs)
    when = dt.datetime.strptime(cpu.id[:15], "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    verdict = read_result(cpu.folder / "04_train.json")["verdict"]
    assert len(labels) == 3
    report = outputs / "20990101-000000-npu" / "results"
    verdicts = [f"{s[:2]} {read_result(report / f'{s}.json')['verdict']}" for s in ("02_attention", "03_inference",
                                                                                   "04_train")]
    assert labels[0] == "smoke · report 02 03 04 · 2099-01-01 00:00:00 · " + ", ".join(verdicts)
    assert f"smoke · 04_train · {when} · {verdict}" in labels[1:]
    attention = next(label for label in labels if "02_attention" in label)
    assert attention.endswith(" · FAIL") and not attention.startswith("smoke")  # no run_name recorded: none shown


def test_the_overlaid_losses_are_interactive_with_a_legend_per_run_and_a_fitted_axis(outputs, monkeypatch):
    c = compare_runs([_cpu_train(outputs), "20990101"], stages=["04_train"], outputs=outputs)
    spec = c.part("losses").spec()
    assert spec["encoding"]["y"]["scale"]["zero"] is False and spec["mark"]["point"] is True
    assert spec["encoding"]["color"]["field"] == "run" and "legend" in spec["encoding"]["color"]
    assert [t["field"] for t in spec["encoding"]["tooltip"]] == ["run", "step", "loss"]
    assert {"select": "interval", "bind": "scales"}.items() <= spec["params"][0].items()  # zoom
    assert sorted({row["run"] for row in spec["data"]["values"]}) == sorted(c.part("losses").frame["label"].unique())
    # in a notebook: the spec for JupyterLab's Vega renderer, the PNG beside it for everything else
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))
    show_comparison(c)
    bundles = [obj for obj in shown if isinstance(obj, dict)]
    assert len(bundles) == 1 and bundles[0][VEGA_LITE_MIME] == spec and len(bundles[0]["image/png"]) > 1000


def test_the_run_picker_lists_a_stage_s_runs_and_refresh_finds_a_new_one(outputs, monkeypatch):
    shown = []
    monkeypatch.setattr(compare_show, "show_comparison", shown.append)
    picker = run_picker(outputs, stage="02_attention")
    first, (button, refresh) = picker.children[0], picker.children[2].children
    before = [value for _, value in first.options]
    assert before == [r.id for r in list_runs(outputs) if "02_attention" in r.stages] and len(before) == 2
    _attention(["FAIL"], CPU)  # recorded after the picker was made
    assert [value for _, value in first.options] == before
    refresh.click()
    after = [value for _, value in first.options]
    assert len(after) == 3 and set(before) < set(after)
    assert (first.value, picker.children[1].value) == tuple(after[:2])  # the newest two
    first.value, picker.children[1].value = before  # compared on the picker's stage only
    button.click()
    assert picker.children[3].value == "" and [c.stages for c in shown] == [["02_attention"]]


def test_report_runs_are_found_under_the_given_root_and_interactive_runs_in_their_history(outputs, tmp_path,
                                                                                          monkeypatch, capsys):
    elsewhere = tmp_path / "elsewhere"  # a report run with --output-dir elsewhere
    record(train_stage, _train([1.0], NPU, 800.0), directory=elsewhere / "20990105-000000-npu" / "results")
    runs = list_runs(elsewhere)
    assert [r.kind for r in runs] == ["report", "interactive", "interactive"]
    assert runs[0].id == "20990105-000000-npu" and "20990101-000000-npu" not in [r.id for r in runs]
    # hyport compare looks up report runs where hyport report writes them: ./outputs
    monkeypatch.chdir(outputs.parent)
    assert main(["compare", "20990101", _cpu_train(outputs).id]) == 0
    assert (outputs / "20990101-000000-npu" / COMPARE_PAGE).is_file()
    assert main(["compare", "20990105", _cpu_train(outputs).id, "--outputs", str(elsewhere)]) == 0
    assert (elsewhere / "20990105-000000-npu" / COMPARE_PAGE).is_file()


def test_report_and_interactive_run_ids_read_one_clock(outputs, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Shanghai")  # 8 hours from UTC
    time.tzset()
    try:
        report_id, _ = new_run_dir(outputs)
        recorded = _attention(["PASS"], CPU)
    finally:
        monkeypatch.undo()
        time.tzset()
    interactive_id = read_result(recorded)["run_id"]
    stamps = [dt.datetime.strptime(i[:15], "%Y%m%d-%H%M%S") for i in (report_id, interactive_id)]
    assert abs(stamps[1] - stamps[0]) <= dt.timedelta(seconds=2), (report_id, interactive_id)


def _attention_rows(backends: dict[str, str], verdicts: dict[str, str]) -> list[dict]:
    """Two cases per backend (backend -> its source); verdicts: backend -> case1's verdict."""
    return [{"case": f"case{i}", "layout": "BSND", "dtype": "float16", "mask": "causal", "backend": backend,
             "source": source, "verdict": verdicts.get(backend, "PASS") if i else "PASS"}
            for backend, source in backends.items() for i in range(2)]


def test_an_emulation_run_is_matched_with_an_npu_run_and_unshared_backends_are_apart(outputs):
    cpu = _attention_rows({"eager": "eager (CPU)", "npu-emulated": "npu-emulated (CPU)",
                           "flash-api (npu-emulated)": "flash-api 2.7.4 → npu-emulated (CPU)"},
                          {"flash-api (npu-emulated)": "FAIL"})
    npu = _attention_rows({"eager": "eager (NPU)", "npu-emulated": "npu-emulated (CPU)", "npu": "npu (NPU)",
                           "flash-api (npu)": "flash-api 2.7.4 → npu (NPU)"}, {})
    for rows, provenance, run in ((cpu, CPU, "20990201-000000-cpu"), (npu, NPU, "20990202-000000-npu")):
        record(attention_stage, _attention_result(rows, provenance), directory=outputs / run / "results")
    c = compare_runs(["20990201", "20990202"], outputs=outputs)
    # the one case whose verdict differs: the drop-in emulated on the CPU vs on the NPU, each labelled
    differs = c.part("attention").frame
    assert len(differs) == 1
    row = differs.iloc[0]
    assert (row["case"], row["backend"]) == ("case1", "flash-api (npu)")
    assert (row["20990201-000000-cpu"], row["20990202-000000-npu"]) == ("FAIL", "PASS")
    assert row["20990201-000000-cpu source"].endswith("npu-emulated (CPU)")
    assert row["20990202-000000-npu source"].endswith("npu (NPU)")
    # the NPU kernel only the NPU run has: listed apart, not as a difference
    assert c.part("attention_unshared").frame.to_dict("records") == [
        {"run": "20990202-000000-npu", "backend": "npu", "source": "npu (NPU)", "cases": 2, "verdicts": "PASS 2"}]
    page = comparison_html(c)
    assert "backends not every run has" in page and "npu (NPU)" in page


def test_the_parameters_that_differ_are_shown_and_no_local_folder_is(outputs, tmp_path):
    cpu = _cpu_train(outputs)
    c = compare_runs([cpu.id, "20990101"], outputs=outputs)
    table = parameter_table(c)
    assert table.loc[("04_train", "max_steps"), cpu.id] == "3"
    assert table.loc[("04_train", "max_steps"), "20990101-000000-npu"] == "4"
    # the run's own folder as <run>/..., the same parameters not listed
    assert table.loc[("04_train", "output_dir"), "20990101-000000-npu"] == "<run>/train/smoke"
    assert ("04_train", "zero_stage") not in table.index
    # 02 of the report run was recorded without parameters: said, and nothing differs there
    assert "run 20990101-000000-npu: its 02_attention record holds no parameters" in c.notes
    assert not any(stage == "02_attention" for stage, _ in table.index)
    # the page: the table, and no local folder (a missing and a half-written record's notes included)
    (outputs / "20990101-000000-npu" / "results" / "03_inference.json").write_text("{half")
    (cpu.folder / "03_inference.json").write_text("{half")
    page = comparison_html(compare_runs([cpu.id, "20990101"], outputs=outputs))
    assert "Parameters that differ" in page and "&lt;run&gt;/train/smoke" in page
    assert "03_inference.json is not a result" in page
    assert str(tmp_path) not in page and os.path.realpath(tmp_path) not in page


def test_stages_are_named_as_report_only_names_them(outputs, capsys):
    cpu = _cpu_train(outputs)
    for name in ("04", "4", "train", "04_train"):
        assert compare_runs([cpu.id, "20990101"], stages=[name], outputs=outputs).stages == ["04_train"]
    assert main(["compare", cpu.id, "20990101", "--outputs", str(outputs), "--stage", "train", "--stage", "02"]) == 0
    assert "02_attention" in capsys.readouterr().out  # the report run's line names its stages
    assert main(["compare", cpu.id, "20990101", "--outputs", str(outputs), "--stage", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--stage nope: not a stage these runs recorded" in err
    assert "02_attention, 03_inference, 04_train" in err


def test_the_command_names_folders_as_the_report_does_and_relative_refs_compare_equal(tmp_path, monkeypatch):
    """``hyport compare outputs/A outputs/B``: the runs' own folders compare equal given
    relative to the working folder, and a folder in the repository reads <repo>/... on the
    page, as in the report (a page sent along names no local folder it can avoid)."""
    repo_folder = Path(__file__).resolve().parent  # inside the repository
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    for name, steps, images in (("20990101-000000-aaaaaa", 2, repo_folder),
                                ("20990102-000000-bbbbbb", 3, repo_folder.parent)):
        run = tmp_path / "outputs" / name
        record(train_stage, _train([2.0, 1.5, 1.2][:steps], CPU, 9.0), directory=run / "results",
                           params=TrainParams(max_steps=steps, output_dir=str(run / "train" / "smoke"),
                                              image_root=str(images)))
    assert main(["compare", "outputs/20990101-000000-aaaaaa", "outputs/20990102-000000-bbbbbb"]) == 0
    page = (tmp_path / "outputs" / "20990101-000000-aaaaaa" / COMPARE_PAGE).read_text()
    table = parameter_table(compare_runs(["outputs/20990101-000000-aaaaaa", "outputs/20990102-000000-bbbbbb"]))
    # output_dir is <run>/train/smoke in both: not a difference
    assert sorted(table.index) == [("04_train", "image_root"), ("04_train", "max_steps")]
    assert "&lt;repo&gt;/tests/workbook" in page and "&lt;repo&gt;/tests<" in page
    assert str(repo_folder.parent) not in page and str(tmp_path) not in page
