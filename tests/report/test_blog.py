"""The blog drafts: every number sourced, failures said, Chinese prose in Chinese, figures.

Fast tests build synthetic runs (a :class:`ReportRun` and result files written by hand);
the slow ones share one real ``run_report`` of the default profile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hyport_lib.report.blog import DRAFTS, render_blog, write_blog_drafts
from hyport_lib.report.paths import default_profiles_dir
from hyport_lib.report.run import NOT_RUN, ReportRun

from blog_drafts import (STAGES, english_runs, figure_links, make_run, numbers_in, stage_draft, train_data,
                         unsourced, write_result)

# --------------------------------------------------------------------------- fast tests
def test_the_checkers_can_fail(tmp_path):
    run = make_run(tmp_path, {"04_train": "PASS"})
    write_result(run, "04_train", "PASS", train_data())
    draft = render_blog(run)
    assert not unsourced(draft, tmp_path)
    assert unsourced(draft + "\nA made-up figure: 424242.77 and 31,337.\n", tmp_path) == ["31337", "424242.77"]
    assert english_runs("这是中文。 But this is an English sentence.") == ["But this is an English sentence"]
    assert english_runs("中文 `code with many words` 中文\n> a quoted English message here\n") == []


def test_a_failed_and_a_skipped_stage_are_said_plainly(tmp_path):
    error = "RuntimeError: planted training failure at step 7"
    run = make_run(tmp_path, {"01_environment": "PASS", "02_attention": "PASS", "03_inference": "WARN",
                              "04_train": "FAIL", "05_weights": NOT_RUN},
                   errors={"04_train": error}, status="interrupted")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "03_inference.json").write_text("{ half a file")
    write_result(run, "01_environment", "PASS", {"device": "cpu", "num_cards": 2,
                                                 "summary": {"PASS": 1, "WARN": 0, "FAIL": 0, "SKIP": 0}})
    paths = write_blog_drafts(run)
    assert [p.name for p in paths] == list(DRAFTS)
    en, zh = (tmp_path / "blog.en.md").read_text(), (tmp_path / "blog.zh.md").read_text()
    assert "## 04 Smoke training — FAIL" in en and "The stage failed. Its recorded error:" in en
    assert f"> {error}" in en and f"> {error}" in zh
    assert "## 05 Saved weights — NOT RUN" in en and "The stage did not run" in en
    assert "## 05 权重校验 — 未运行" in zh and "该阶段没有运行" in zh and "该阶段失败" in zh
    assert "Stages that failed: 04_train." in en and "失败的阶段：04_train" in zh
    assert "Stages that did not finish: 05_weights." in en and "没有完成的阶段：05_weights" in zh
    assert "03_inference.json: Expecting property name" in en  # the odd file, named
    assert "No result file and no figures were recorded" in en.split("## 02 ")[1].split("\n## ")[0]  # 02 PASS without a file
    assert "There are no dataset figures" in en and "没有数据集的数值" in zh
    assert "The run was stopped before it finished" in en
    section_04 = en.split("## 04 ")[1].split("\n## ")[0]
    assert "own summary" not in section_04  # the runner's placeholder is not the stage's words
    assert "No result file and no figures were recorded" in section_04  # and no promise of any
    assert not (tmp_path / "figures").exists()  # nothing to draw
    for draft in (en, zh):
        assert not unsourced(draft, tmp_path)
    assert not english_runs(zh)
    assert (tmp_path / "blog.md").read_text() == en


def test_a_run_that_has_not_started_is_drafted_without_figures(tmp_path):
    run = make_run(tmp_path, {}, status="running")
    write_blog_drafts(run)
    en, zh = (tmp_path / "blog.md").read_text(), (tmp_path / "blog.zh.md").read_text()
    assert en.count("The stage has not run yet.") == len(STAGES)
    assert zh.count("该阶段尚未运行。") == len(STAGES)
    assert "Source of figures" not in en  # no provenance claimed for what has no figure
    assert not (tmp_path / "figures").exists()
    assert not list(tmp_path.glob(".blog*.tmp"))  # atomic writes leave no temporary file


@pytest.mark.parametrize("stage", STAGES)
def test_odd_recorded_data_never_stops_the_drafts(tmp_path, stage):
    run = make_run(tmp_path, {s: "PASS" for s in STAGES})
    odd = {"rows": "oops", "plan": 5, "metrics": [1, "x", {"step": "one"}], "scan": {"hits": [3]},
           "shards": [None], "reload": {"path": None}, "counts": [], "system": 7, "checks": {"a": 1},
           "outputs": {"0": {"single": None}}, "model": {"verdict": None}, "summary": "weird"}
    write_result(run, stage, "PASS", odd, headline={"cases": "many"})
    for lang in ("en", "zh"):
        draft = render_blog(run, lang)
        assert "## 05" in draft and ("## Commands to reproduce" in draft or "## 复现命令" in draft)
    write_blog_drafts(run)
    assert (tmp_path / "blog.zh.md").is_file()


@pytest.mark.parametrize("stage", STAGES)
def test_odd_recorded_data_keeps_the_caveats_of_every_stage(tmp_path, stage):
    """The caveats (where each stage's figures come from) are drafted from every record:
    one stage's odd record (a plan that is no plan) must not take the others' away."""
    run = make_run(tmp_path, {s: "PASS" for s in STAGES})
    write_result(run, stage, "PASS", {"plan": 5, "summary": "weird"})
    draft = render_blog(run)
    assert "## Caveats" in draft and "could not be drafted" not in draft and "could not be read" not in draft
    assert "Figures marked as CPU or NPU-emulated were not measured on an NPU." in draft


def test_the_loss_figure_is_drawn_once_and_linked_relatively(tmp_path):
    run = make_run(tmp_path, {"04_train": "PASS"})
    write_result(run, "04_train", "PASS", train_data())
    write_blog_drafts(run)
    png = tmp_path / "figures" / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in DRAFTS:
        draft = (tmp_path / name).read_text()
        assert figure_links(draft) == ["figures/loss.png"]
        assert (tmp_path / figure_links(draft)[0]).is_file()
    stamp = png.stat().st_mtime_ns
    write_blog_drafts(run)
    assert png.stat().st_mtime_ns == stamp  # not redrawn: its result did not change
    en = (tmp_path / "blog.md").read_text()
    assert "| train_loss (mean of the finite step losses) | 2.251 |" in en
    assert "| Loss, first → last | 2.75 → 1.75 |" in en
    assert "as the Trainer reports it" not in en  # the same figure: not said twice
    assert "| Tokens/s per card | 2,315.5 |" in en and "Samples were packed to max_seq_len 512." in en
    assert not unsourced(en, tmp_path)


def test_no_loss_figure_without_metrics(tmp_path):
    run = make_run(tmp_path, {"04_train": "FAIL"}, errors={"04_train": "torchrun exited 1"})
    data = train_data()
    data["metrics"] = []
    write_result(run, "04_train", "FAIL", data)
    write_blog_drafts(run)
    en = (tmp_path / "blog.md").read_text()
    assert not (tmp_path / "figures" / "loss.png").exists() and not figure_links(en)
    assert "No step was logged" in en and "What the stage recorded before it failed:" in en


def test_emulated_figures_are_never_called_npu_figures(tmp_path):
    run = make_run(tmp_path, {"02_attention": "PASS"})
    write_result(run, "02_attention", "PASS", {"rows": [], "notes": []},
                 headline={"cases": 3, "rows PASS/WARN/FAIL": "9/0/0", "worst npu-emulated err/bound": 0.5},
                 provenance={"device": "cpu", "emulated": True,
                             "label": "NPU-emulated on CPU (not an NPU measurement)"})
    en, zh = render_blog(run), render_blog(run, "zh")
    assert "computed by hyport's emulation of the NPU operator on CPU, not measured on an NPU" in en
    assert "measured on an NPU." not in en.replace("not measured on an NPU", "")
    assert "由 hyport 在 CPU 上仿真 NPU 算子计算得到，并非 NPU 实测" in zh
    assert "在 NPU 上实测" not in zh


def test_secret_values_are_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_TEST_SECRET_TOKEN", "s3cr3t-value-xyz")
    run = make_run(tmp_path, {"04_train": "FAIL"}, errors={"04_train": "failed with s3cr3t-value-xyz in argv"})
    assert [p.name for p in write_blog_drafts(run)] == list(DRAFTS)
    for name in DRAFTS:
        text = (tmp_path / name).read_text()
        assert "s3cr3t-value-xyz" not in text and "[redacted]" in text


def test_the_reproduce_command_names_the_profile_and_what_differs(tmp_path):
    from hyport_lib.report.run_parameters import load_profile, resolve_profile

    profile = resolve_profile("default")
    run = make_run(tmp_path, {}, parameters={**load_profile(profile), "max_steps": 7})
    run.profile = str(profile)
    en = render_blog(run)
    assert "hyport report --profile default -p max_steps=7" in en


def test_a_profile_outside_the_project_is_never_written_by_its_local_path(tmp_path):
    # A draft is sent to others: /home/<user>/... says nothing to them and tells about the host.
    profile = tmp_path / "private" / "mine.yaml"
    profile.parent.mkdir()
    profile.write_text("device: cpu\nmax_steps: 7\n")
    run = make_run(tmp_path / "run", {}, parameters={"device": "cpu", "max_steps": 7})
    run.profile = str(profile)
    for lang in ("en", "zh"):
        text = render_blog(run, lang)
        assert str(profile.parent) not in text and "…/mine.yaml" in text
        # the command still gives every parameter back, without the file
        assert "hyport report --profile none -p device=cpu -p max_steps=7" in text
    # named as the index names it: under the run folder by <run>, a bundled one by its name
    run.run_dir = tmp_path
    assert "the profile `<run>/private/mine.yaml`" in render_blog(run)
    run.profile = str(default_profiles_dir() / "default.yaml")
    assert "the profile `default`" in render_blog(run)


def test_without_a_profile_the_command_says_profile_none(tmp_path):
    # Leaving --profile out would apply parameters/default.yaml: not what ran.
    run = make_run(tmp_path, {}, parameters={"device": "cpu", "max_steps": 7})
    assert "hyport report --profile none -p device=cpu -p max_steps=7" in render_blog(run)


def test_a_stage_that_judged_its_result_a_fail_is_not_told_as_a_crash(tmp_path):
    run = make_run(tmp_path, {"01_environment": "FAIL"})
    write_result(run, "01_environment", "FAIL", {"device": "cpu", "num_cards": 2,
                                                 "summary": {"PASS": 4, "WARN": 0, "FAIL": 1, "SKIP": 0}},
                 summary="4 PASS / 0 WARN / 1 FAIL / 10 SKIP on cpu; first FAIL: host_ram")
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    section = en.split("## 01 ")[1].split("\n## ")[0]
    assert "ran to its end and judged the result a FAIL" in section and "first FAIL: host_ram" in section
    assert "no error was recorded" not in section and "before it failed" not in section
    assert "What the stage recorded:" in section
    assert "判定结果为 FAIL" in zh and "没有记录错误信息" not in zh and not english_runs(zh)


@pytest.mark.parametrize("reload,shards", [(True, True), (False, True), (False, False)])
def test_the_weights_section_says_what_was_done_and_never_leaves_a_gap(tmp_path, reload, shards):
    run = make_run(tmp_path, {"05_weights": "PASS"})
    data = {"path": "/w", "reload": {"load_ok": True} if reload else None,
            "shards": [{"file": "model.safetensors", "bytes": 10, "tensors": 1}] if shards else []}
    write_result(run, "05_weights", "PASS", data)
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert ("then reloaded" in en) == reload and ("再重新加载" in zh) == reload
    assert ("Its files:" in en) == shards and ("No weight file was found in it." in en) != shards
    assert ("目录中的文件" in zh) == shards and not english_runs(zh)


# --------------------------------------------------------------------------- one real run
@pytest.fixture(scope="module")
def real_run(default_report):
    """The session's five-stage run on the default profile (tests/fixtures_runs.py), as
    the runner recorded it in run.json."""
    proc, run_dir = default_report
    assert run_dir is not None, proc.stderr[-3000:]
    return ReportRun.from_dict(json.loads((run_dir / "run.json").read_text()))


@pytest.mark.slow
def test_real_run_every_number_has_a_recorded_source(real_run):
    run_dir = real_run.run_dir
    assert [s.verdict for s in real_run.stages] == ["PASS"] * len(STAGES), real_run.stages
    for name in DRAFTS:
        draft = (run_dir / name).read_text(encoding="utf-8")
        assert len(numbers_in(draft)) > 100  # the tables are there
        assert not unsourced(draft, run_dir), name
    assert (run_dir / "blog.md").read_text() == (run_dir / "blog.en.md").read_text()


@pytest.mark.slow
def test_real_run_tables_carry_the_recorded_values(real_run):
    run_dir = real_run.run_dir
    results = {s: json.loads((run_dir / "results" / f"{s}.json").read_text()) for s in STAGES}
    en, zh = (run_dir / "blog.en.md").read_text(), (run_dir / "blog.zh.md").read_text()
    train = results["04_train"]["data"]
    loss = train["summary"]["mean_loss"]
    assert f"| train_loss (mean of the finite step losses) | {loss:.4g} |" in en
    assert f"| train_loss（各步有限损失的均值） | {loss:.4g} |" in zh
    assert f"| Exit code | {train['exit_code']} |" in en and f"| 退出码 | {train['exit_code']} |" in zh
    weights = results["05_weights"]["data"]
    for shard in weights["shards"]:
        assert f"{shard['bytes']:,} / {shard['tensors']}" in en
    assert f"```text\n{weights['reload']['line']}\n```" in zh and weights["reload"]["line"].startswith("LOAD_OK")
    # the run's folder as <run> (a draft names no local folder); the rest of the path as recorded
    relative = Path(weights["path"]).relative_to(run_dir).as_posix()
    assert f"hyport verify <run>/{relative} --reload" in en and weights["path"] not in en
    inference = results["03_inference"]["data"]
    assert inference["outputs"]["0"]["single"] in en
    assert "hyport report --profile default" in en and "hyport report --profile default" in zh
    for view in results.values():  # CPU and emulated figures are named as such
        assert view["provenance"]["label"] in en


@pytest.mark.slow
def test_real_run_chinese_draft_is_chinese(real_run):
    zh = (real_run.run_dir / "blog.zh.md").read_text(encoding="utf-8")
    assert not english_runs(zh), english_runs(zh)
    assert english_runs((real_run.run_dir / "blog.en.md").read_text(encoding="utf-8"))
    assert len(re.findall(r"[\u4e00-\u9fff]", zh)) > 500


@pytest.mark.slow
def test_real_run_figures_exist_and_both_drafts_link_them(real_run):
    run_dir = real_run.run_dir
    assert sorted(p.name for p in run_dir.glob("blog*.md")) == sorted(DRAFTS)
    for name in DRAFTS:
        links = figure_links((run_dir / name).read_text(encoding="utf-8"))
        assert "figures/loss.png" in links, name
        for link in links:
            assert not Path(link).is_absolute() and ".." not in link
            assert (run_dir / link).read_bytes()[:4] == b"\x89PNG"


def test_the_title_counts_the_cards_stage_01_found_before_the_ones_asked_for(tmp_path):
    # The default profile leaves num_cards to the stages (None: all); stage 01 records
    # how many the next stages use, and the title says that.
    run = make_run(tmp_path, {"01_environment": "PASS"}, parameters={"device": "cpu"})
    write_result(run, "01_environment", "PASS", {"device": "cpu", "num_cards": 2})
    assert render_blog(run, "en").splitlines()[0].startswith("# Porting notes: `tiny` on 2 `cpu` card(s)")
    assert "在 2 张 `cpu` 卡上" in render_blog(run, "zh").splitlines()[0]
    without = make_run(tmp_path / "none", {}, parameters={"device": "cpu"})
    assert "card" not in render_blog(without, "en").splitlines()[0]
    asked = make_run(tmp_path / "asked", {}, parameters={"device": "cpu", "num_cards": 3})
    assert " on 3 `cpu` card(s)" in render_blog(asked, "en").splitlines()[0]
    write_result(asked, "01_environment", "PASS", {"device": "cpu", "num_cards": 2})  # 3 asked, 2 found
    assert " on 2 `cpu` card(s)" in render_blog(asked, "en").splitlines()[0]
    # without stage 01, the cards the grid or the training ran on
    later = make_run(tmp_path / "later", {"03_inference": "PASS"}, parameters={"device": "cpu"})
    write_result(later, "03_inference", "PASS", {"plan": {"cards": [{"card": 0, "run": True},
                                                                    {"card": 1, "run": False}]}})
    assert " on 1 `cpu` card(s)" in render_blog(later, "en").splitlines()[0]
    trained = make_run(tmp_path / "trained", {"04_train": "PASS"}, parameters={"device": "cpu"})
    write_result(trained, "04_train", "PASS", train_data())
    assert " on 2 `cpu` card(s)" in render_blog(trained, "en").splitlines()[0]


def test_a_run_without_the_training_stage_says_so_in_the_dataset_notes(tmp_path):
    run = make_run(tmp_path, {"01_environment": "PASS"})
    run.stages, run.left_out = run.stages[:1], STAGES[1:]  # as the runner records --only 01
    write_result(run, "01_environment", "PASS", {"device": "cpu", "num_cards": 2})
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert "## Dataset\n\nThe training stage was not part of this run" in en
    assert "## 数据集说明\n\n本次运行不包含训练阶段" in zh
    run.left_out = []  # a notebooks folder without the training stage: no dataset notes at all
    assert "## Dataset" not in render_blog(run, "en") and "数据集说明" not in render_blog(run, "zh")


def test_a_run_ending_on_nan_losses_says_which_loss_is_last_and_gives_both_train_losses(tmp_path):
    run = make_run(tmp_path, {"04_train": "WARN"})
    data = train_data(6)
    data["summary"].update({"first_loss": 6.7093, "last_loss": 6.7093, "mean_loss": 6.7093,
                            "last_step": 6, "last_loss_step": 1})
    data["worker"]["train_metrics"]["train_loss"] = 1.1182  # the Trainer: NaN steps as 0
    write_result(run, "04_train", "WARN", data)
    write_blog_drafts(run)
    en, zh = (tmp_path / "blog.en.md").read_text(), (tmp_path / "blog.zh.md").read_text()
    assert "| Loss, first → last | 6.7093 → 6.7093 (last finite: step 1 of 6) |" in en
    assert "| train_loss (mean of the finite step losses) | 6.7093 |" in en
    assert "| train_loss as the Trainer reports it (its own process's steps, a NaN step as zero) | 1.1182 |" in en
    assert "（最后一个有限值在第 1 步，共 6 步）" in zh and "| Trainer 自报的 train_loss" in zh
    assert not unsourced(en, tmp_path) and not unsourced(zh, tmp_path)


def test_stages_left_out_with_only_are_named_in_the_drafts_and_the_index(tmp_path):
    from hyport_lib.report.index import render_index

    run = make_run(tmp_path, {"01_environment": "PASS", "05_weights": "PASS"})
    run.stages = [s for s in run.stages if s.stage in ("01_environment", "05_weights")]
    run.left_out = ["02_attention", "03_inference", "04_train"]
    write_result(run, "01_environment", "PASS", {"device": "cpu", "num_cards": 2})
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert "the stages 02 Attention swap, 03" in en and "left out of it (`--only`)" in en
    assert "- Not part of this run (left out with `--only`): 02 Attention swap" in en
    assert "未包含在内（`--only`）" in zh and "推理与训练" not in zh.splitlines()[0]
    assert not english_runs(zh), english_runs(zh)
    assert "Not part of this run (left out with --only): 02_attention, 03_inference, 04_train" in render_index(run)
    full = make_run(tmp_path / "full", {})
    assert "left out" not in render_blog(full, "en") and "Not part of this run" not in render_index(full)


def test_the_scan_is_told_by_kind_one_line_per_source_line_and_a_mismatched_pin_is_named(tmp_path):
    run = make_run(tmp_path, {"02_attention": "PASS"})
    long = "hyport_lib.npu_attention.flash_api.install_flash_attn_shim(backend) before the model's import"
    hits = [{"file": "m.py", "line": 3, "category": "flash_attn", "snippet": "from flash_attn import a, b, c",
             "suggestion": long} for _ in range(3)]
    hits += [{"file": "m.py", "line": 9, "category": "flash_attn", "snippet": "a(q, k, v)", "suggestion": long},
             {"file": "m.py", "line": 12, "category": "is_cuda_guard", "snippet": "if q.is_cuda:",
              "suggestion": "silently falls back"}]
    data = {"rows": [], "backends": [], "flash_attn_version": "2.7.4.post1",
            "scan": {"path": "/code", "files_scanned": 1, "hits": hits,
                     "pinned": {"flash-attn": "==2.6.3 (requirements.txt:2)"}}}
    write_result(run, "02_attention", "PASS", data)
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    assert en.count(long) == 1 and zh.count(long) == 1  # each suggestion once
    assert en.count("`m.py:3`") == 1  # a line importing three names is one place
    assert "- flash-attn code (`flash_attn`), 2 line(s); write instead: " in en
    assert "- is_cuda guards around attention (`is_cuda_guard`), 1 line(s)" in en
    assert "The drop-in served the flash-attn `2.7.4.post1` API" in en and "to `2.6.3`." in en
    assert "flash-attn 代码（`flash_attn`），共 2 行；改法（扫描器给出的英文原文）：" in zh
    assert "请把 `flash_attn_version` 设为 `2.6.3`" in zh and not english_runs(zh)
    data["flash_attn_version"] = "2.6.3"
    write_result(run, "02_attention", "PASS", data)
    assert "The drop-in served" not in render_blog(run, "en")


@pytest.mark.parametrize("warmup,cold,warm", [(1, 0.9, True), (0, None, False), (None, None, False)])
def test_inference_figures_are_called_warm_only_after_a_warm_up(tmp_path, warmup, cold, warm):
    run = make_run(tmp_path, {"03_inference": "PASS"})
    row = {"card": 0, "status": "ok", "load_s": 1.5, "cold_s": cold, "first_token_s": 0.02,
           "tokens_per_s": 600.5, "decode_tokens_per_s": 700.25, "peak_memory_mb": 512.0}
    config = {} if warmup is None else {"warmup_runs": warmup}
    write_result(run, "03_inference", "PASS", {"rows": [row], "counts": {"ok": 1}, "config": config})
    for lang, word in (("en", "warm"), ("zh", "预热后")):
        draft = render_blog(run, lang)
        table = [line for line in draft.splitlines() if line.startswith("|")][:1]
        assert table and (word in table[0]) == warm, table
        assert ("Cold first call" in draft or "冷启动首次调用" in draft) == warm
    assert not unsourced(render_blog(run, "en"), tmp_path)


def test_stage_03_says_a_random_weight_answer_only_shows_agreement(tmp_path):
    data = {"config": {"model_path": "tiny", "single_prompt": "Describe the image."},
            "outputs": {"0": {"single": "noise noise"}}, "counts": {"ok": 1}}
    text = stage_draft(tmp_path, "03_inference", data)
    assert "random weights: not meaningful (the embedded tiny model): it only shows that every card" in text
    data["config"]["model_path"] = "/models/real"
    assert "The answer of card 0 to the prompt `Describe the image.`:" in stage_draft(tmp_path, "03_inference", data)


def test_answers_and_random_weight_notes_are_recorded_text_in_the_chinese_draft(tmp_path):
    """The real run's Chinese draft held "the embedded tiny model" outside marked recorded text."""
    tiny = "random weights: not meaningful (the embedded tiny model)"
    model = {"verdict": "PASS", "behaviour": {"meaningful": False, "why": tiny}}
    assert not english_runs(stage_draft(tmp_path, "02_attention", {"model": model}, "zh"))
    train = train_data()
    train["worker"]["held_answers"] = {"why_not": tiny}
    assert not english_runs(stage_draft(tmp_path, "04_train", train, "zh"))
    train["worker"]["held_answers"] = {"prompts": ["How do I open a fridge?"],
                                       "taught": ["Hold the handle and pull the door gently."],
                                       "before": ["You will need to use a combination"],
                                       "after": ["Hold the handle and pull the door gently."]}
    assert not english_runs(stage_draft(tmp_path, "04_train", train, "zh"))
    model["behaviour"] = {"meaningful": True, "new_tokens": 32, "prompts": ["What is the capital of France?"],
                          "eager_answers": ["The capital of France is Paris."], "pairs": [
                              {"label": "x", "dtype": "bfloat16", "identical": False, "answers": ["a b c"],
                               "first_difference": {"prompt": 0, "token": 3, "eager": " the", "swapped": " a"}}]}
    assert not english_runs(stage_draft(tmp_path, "02_attention", {"model": model}, "zh"))
