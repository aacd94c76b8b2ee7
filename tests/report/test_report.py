"""The report runner: profiles, overrides, parameter resolution and the pre-run plans, stage
selection, failing stages, offline HTML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hyport_lib.commands import main
from hyport_lib.commands import report as report_command
from hyport_lib.report import stage_run as report_html
from hyport_lib.report import runner
from hyport_lib.params import Field, ParameterError, Spec
from hyport_lib.report.run_parameters import (absolutize_paths, coerce_overrides, load_profile, make_plans,
                                              parse_overrides, plan_requests, resolve_profile,
                                              resolve_parameters, safe_parameters)
from hyport_lib.report.run import ReportRun, new_run_dir
from hyport_lib.results import RESULTS_DIR_ENV, RUN_DIR_ENV, StageRecord, read_result, write_record
from hyport_lib.report.runner import run_report
from hyport_lib.stages import discover_stages, select_stages

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stage_dir(tmp_path, plant_stage):
    folder = tmp_path / "nbs"
    plant_stage(folder, "01_good", "from hyport_lib.results import Provenance, StageRecord, write_record\n"
                "import os\nprint('cwd', os.getcwd())\n"
                "write_record(StageRecord('01_good', 'PASS', summary=f'level {level}', "
                "headline={'level': level}, provenance=Provenance(device='cpu')))", level=1)
    plant_stage(folder, "02_boom", "raise RuntimeError('planted failure in stage 02')")
    plant_stage(folder, "03_after", "from hyport_lib.results import StageRecord, write_record\n"
                "write_record(StageRecord('03_after', 'WARN', summary='still ran after a failure'))")
    return folder


def _fields(**kinds) -> dict:
    """name -> Field of that kind ("path" for a path text), None default."""
    return {name: Field(name, "str" if kind == "path" else kind, True, None,
                        Spec(doc="", path="any" if kind == "path" else None,
                             not_paths=("tiny", "auto", "none"), hub_id=name == "model_path"))
            for name, kind in kinds.items()}


def test_overrides_are_typed_by_the_declared_types():
    raw = parse_overrides(["max_steps=20", "device=cpu", "flag=true", "x=", "l=[1, 2]",
                           "single_prompt=Translate: hello", "answer=yes", "model_path=0755"])
    assert raw["single_prompt"] == "Translate: hello"
    fields = _fields(max_steps="int", device="str", flag="bool", x="str", l="list",
                     single_prompt="str", answer="str", model_path="path")
    typed = coerce_overrides(raw, fields)
    # text stays text (a prompt "yes", a folder "0755"); lists, numbers and flags are
    # typed as YAML types them; what they must be is checked by their field
    assert typed == {"max_steps": 20, "device": "cpu", "flag": True, "x": "", "l": [1, 2],
                     "single_prompt": "Translate: hello", "answer": "yes", "model_path": "0755"}
    with pytest.raises(ValueError, match="max_steps"):
        coerce_overrides({"max_steps": "[unclosed"}, _fields(max_steps="list"))
    with pytest.raises(ValueError, match="max_steps"):
        fields["max_steps"].convert("[unclosed")
    with pytest.raises(ValueError, match="'oops'"):
        parse_overrides(["oops"])
    with pytest.raises(ValueError, match="'1x=2'"):
        parse_overrides(["1x=2"])


def test_profiles_resolve_by_name_and_errors_name_the_file(tmp_path):
    assert resolve_profile("default").name == "default.yaml"
    assert load_profile(resolve_profile("ascend-910b-8card"))["num_cards"] == 8
    with pytest.raises(FileNotFoundError, match="nosuch"):
        resolve_profile("nosuch")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="bad.yaml"):
        load_profile(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [unclosed\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        load_profile(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("device: cpu\ndevice: npu\n")
    with pytest.raises(ValueError, match="twice.yaml.*'device' given twice"):
        load_profile(twice)
    merged = tmp_path / "merged.yaml"  # YAML merge keys still work; overriding a merged key is no duplicate
    merged.write_text("base: &base {device: cpu, max_steps: 5}\ntrain:\n  <<: *base\n  device: npu\n")
    assert load_profile(merged)["train"] == {"device": "npu", "max_steps": 5}
    other = tmp_path / "profile.txt"  # another suffix: found and read, not "not found"
    other.write_text("num_cards: 3\n")
    assert load_profile(resolve_profile(str(other))) == {"num_cards": 3}


def test_seed_profile_matches_the_seed_case():
    seed = load_profile(resolve_profile("ascend-910b-8card"))
    assert seed["device"] == "npu" and seed["model_path"] == "/data/models/HY-Embodied-0.5"
    assert seed["max_steps"] is None and seed["save_steps"] == 100000
    assert seed["zero_stage"] == 2 and seed["precision"] == "bf16"
    assert seed["per_device_train_batch_size"] == 1 and seed["gradient_accumulation_steps"] == 1
    assert seed["gradient_checkpointing"] is True and seed["num_cards"] == 8


def test_stage_selection(stage_dir):
    stages = discover_stages(stage_dir)
    assert [s.id for s in stages] == ["01_good", "02_boom", "03_after"]
    assert [s.id for s in select_stages(stages, ["1", "03"])] == ["01_good", "03_after"]
    assert [s.id for s in select_stages(stages, ["boom"])] == ["02_boom"]
    with pytest.raises(ValueError, match="07"):
        select_stages(stages, ["07"])


def test_run_dirs_are_unique(tmp_path):
    ids = {new_run_dir(tmp_path)[0] for _ in range(20)}
    assert len(ids) == 20


def test_relative_paths_are_made_absolute(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "cat.png").write_bytes(b"png")
    fields = _fields(code_path="path", model_path="path", n="int", image="path", log_dir="path", other="str",
                     dataset_path="path", deepspeed_config="path", resume_from="path", image_root="path",
                     weights_path="path")
    out = absolutize_paths({"code_path": "code", "model_path": "tiny", "n": 3, "image": "cat.png",
                            "log_dir": "not/yet", "other": "code"}, fields, tmp_path)
    assert out == {"code_path": str((tmp_path / "code").resolve()), "model_path": "tiny", "n": 3,
                   "image": str((tmp_path / "cat.png").resolve()),
                   "log_dir": str((tmp_path / "not/yet").resolve()), "other": "code"}
    # missing files are resolved where the user is (and named there when refused); names
    # that are no files stay; path values are never parsed as numbers
    more = absolutize_paths({"dataset_path": "mydata/train.json", "deepspeed_config": "ds.json",
                             "resume_from": "auto", "model_path": "org/model", "image_root": "imgs"},
                            fields, tmp_path)
    assert more == {"dataset_path": str(tmp_path / "mydata/train.json"), "deepspeed_config": str(tmp_path / "ds.json"),
                    "resume_from": "auto", "model_path": "org/model", "image_root": str(tmp_path / "imgs")}
    assert coerce_overrides({"weights_path": "2024", "n": "20"}, fields) == {"weights_path": "2024", "n": 20}


def test_widgets_are_made_static():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cell = nbformat.v4.new_code_cell("w")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        report_html.WIDGET_MIME: {"model_id": "abc"}, "text/plain": "HBox()"})]
    nb.cells = [cell]
    out = report_html.staticize_widgets(nb)
    assert "widgets" not in out.metadata
    assert out.cells[0].outputs[0]["data"] == {"text/plain": report_html.WIDGET_NOTE}
    assert "widgets" in nb.metadata  # the input is not modified


@pytest.mark.slow
def test_failing_stage_is_reported_and_later_stages_run(stage_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = run_report(profile=None, overrides={"level": 7}, notebooks_dir=stage_dir,
                     output_root=tmp_path / "out", cell_timeout_s=120, progress=lambda m: None)
    verdicts = {s.stage: s.verdict for s in run.stages}
    assert verdicts == {"01_good": "PASS", "02_boom": "FAIL", "03_after": "WARN"}
    assert not run.ok
    boom = run.stages[1]
    assert "RuntimeError" in boom.error and "planted failure in stage 02" in boom.error
    for s in run.stages:  # the failed stage still has its notebook, HTML and log
        assert (run.run_dir / s.notebook).exists() and (run.run_dir / s.html).exists()
        assert (run.run_dir / s.log).exists()
    assert "planted failure" in (run.run_dir / boom.html).read_text()
    index = (run.run_dir / "index.html").read_text()
    assert "planted failure in stage 02" in index and ">FAIL<" in index
    assert "level: <b>7</b>" in index
    good = json.loads((run.run_dir / "results" / "01_good.json").read_text())
    assert good["summary"] == "level 7" and good["provenance"]["device"] == "cpu"
    # notebooks run in their own folder, wherever the command was started
    assert f"cwd {stage_dir}" in (run.run_dir / run.stages[0].notebook).read_text()
    assert json.loads((run.run_dir / "run.json").read_text())["ok"] is False
    assert "02 boom — FAIL" in (run.run_dir / "blog.md").read_text()
    assert not (run.run_dir / ".partial").exists() and not (run.run_dir / ".runner.lock").exists()
    assert "失败的阶段：02_boom" in (run.run_dir / "blog.zh.md").read_text()


@pytest.mark.slow
def test_cli_exit_codes_and_unknown_parameters(stage_dir, tmp_path):
    base = [sys.executable, "-m", "hyport_lib", "report", "--profile", "none",
            "--notebooks", str(stage_dir), "--output-dir", str(tmp_path / "o")]
    bad = subprocess.run(base + ["-p", "nosuch=1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nosuch" in bad.stderr
    ok = subprocess.run(base + ["--only", "01,03"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "[1/2] 01_good PASS" in ok.stderr and "[2/2] 03_after WARN" in ok.stderr
    index = Path(ok.stdout.strip().splitlines()[-1])
    assert index.name == "index.html" and index.exists()
    failed = subprocess.run(base + ["--only", "02"], capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1


def test_blog_and_index_escape_what_they_show(tmp_path):
    from hyport_lib.report.blog import render_blog
    from hyport_lib.report.index import render_index
    from hyport_lib.report.run import ReportRun, StageOutcome
    from hyport_lib.results import Provenance

    stage = StageOutcome(stage="02_attention", verdict="PASS", summary="<b>x</b>",
                         headline={"max |Δ logits|": 1e-7}, provenance=Provenance("cpu", emulated=True))
    run = ReportRun(run_id="r1", run_dir=tmp_path, profile=None,
                    parameters={"trust_remote_code": True}, stages=[stage], versions={}, started="t")
    blog = render_blog(run)
    assert "| max \\|Δ logits\\| | 1e-07 |" in blog
    assert "NPU-emulated on CPU" in blog and "trust_remote_code was ON" in blog
    zh = render_blog(run, "zh")
    assert "## 02 注意力替换 — 通过" in zh and "trust_remote_code 已开启" in zh
    assert "| 指标 | 数值 |" in zh
    with pytest.raises(ValueError, match="lang='fr'"):
        render_blog(run, "fr")
    index = render_index(run)
    assert "&lt;b&gt;x&lt;/b&gt;" in index and "<b>x</b>" not in index
    assert "trust_remote_code is ON" in index


@pytest.mark.slow
def test_a_hung_cell_is_stopped_by_the_cell_timeout(tmp_path, plant_stage):
    folder = tmp_path / "nbs"
    plant_stage(folder, "01_hang", "import time\ntime.sleep(600)")
    said = []
    run = run_report(profile=None, notebooks_dir=folder, output_root=tmp_path / "out",
                     cell_timeout_s=3, progress=said.append)
    stage = run.stages[0]
    assert stage.verdict == "FAIL" and "timed out" in stage.error.lower()
    line = next(m for m in said if m.startswith("[1/1]"))
    assert "\n" not in line and "timed out" in line.lower()  # one line per stage on the terminal
    assert stage.duration_s < 60
    assert (run.run_dir / stage.html).exists()


@pytest.mark.slow
def test_relative_output_dir_and_awkward_secrets(stage_dir, tmp_path, monkeypatch, plant_stage):
    """A relative --output-dir still collects results; a secret with quotes, a backslash
    and non-ASCII characters is scrubbed from every file; files are shareable (0644)."""
    secret = 'pa"ss\\wörd-7c1f'
    monkeypatch.setenv("DB_PASSWORD", secret)
    plant_stage(stage_dir, "04_leaky", "import os\nfrom hyport_lib.results import StageRecord, write_record\n"
                "print(os.environ['DB_PASSWORD'])\n"
                "write_record(StageRecord('04_leaky', 'PASS', summary=os.environ['DB_PASSWORD']))")
    monkeypatch.chdir(tmp_path)
    run = run_report(profile=None, notebooks_dir=stage_dir, only=["01", "04"],
                     output_root=Path("relative-out"), progress=lambda m: None)
    assert run.run_dir.is_absolute() and run.run_dir.parent == tmp_path / "relative-out"
    assert [s.verdict for s in run.stages] == ["PASS", "PASS"]
    for path in (p for p in run.run_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for form in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
            assert form.encode() not in data, path
        assert path.stat().st_mode & 0o044 == 0o044, path  # group/other may read
    assert run.stages[1].summary == "[redacted]"


@pytest.mark.slow
def test_unknown_profile_keys_are_refused_unless_allowed(stage_dir, tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("# hyport report --profile p.yaml\nmax_steps: null\nlevel: 2\nlevl: 3\n")
    with pytest.raises(ParameterError) as info:
        run_report(profile=str(profile), notebooks_dir=stage_dir, only=["01"],
                   output_root=tmp_path / "o", progress=lambda m: None)
    assert "did you mean 'level'" in " ".join(info.value.details)
    assert any("'max_steps'" in d for d in info.value.details)
    assert not (tmp_path / "o").exists()  # nothing ran, nothing was written
    run = run_report(profile=str(profile), overrides={"max_steps": "20", "level": "5"},
                     notebooks_dir=stage_dir, only=["01"], output_root=tmp_path / "o",
                     progress=lambda m: None, allow_unknown_parameters=True)
    assert run.unused_parameters == ["levl", "max_steps"]
    stages_here = sorted(p.stem for p in stage_dir.glob("[0-9][0-9]_*.ipynb"))
    assert run.left_out == [s for s in stages_here if not s.startswith("01_")] and run.left_out
    assert json.loads((run.run_dir / "run.json").read_text())["left_out"] == run.left_out
    assert run.parameters["max_steps"] == 20 and run.stages[0].summary == "level 5"
    with pytest.raises(ValueError, match="nosuch"):
        run_report(profile=str(profile), overrides={"nosuch": "1"}, notebooks_dir=stage_dir,
                   output_root=tmp_path / "o", progress=lambda m: None,
                   allow_unknown_parameters=True)


def test_an_interrupted_run_still_leaves_its_index(stage_dir, tmp_path, monkeypatch):
    import papermill

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    # the pre-run plans are a child process (none in the fast tier); they accept these stages
    monkeypatch.setattr(runner, "check_before_running", lambda params, stages: [])
    with pytest.raises(KeyboardInterrupt):
        run_report(profile=None, notebooks_dir=stage_dir, output_root=tmp_path / "o",
                   progress=lambda m: None)
    (run_dir,) = (tmp_path / "o").iterdir()
    data = json.loads((run_dir / "run.json").read_text())
    verdicts = {s["stage"]: s["verdict"] for s in data["stages"]}
    assert verdicts == {"01_good": "INTERRUPTED", "02_boom": "NOT RUN", "03_after": "NOT RUN"}
    assert "interrupted" in data["stages"][0]["error"]
    assert data["status"] == "interrupted" and data["ok"] is False and data["finished"]
    index = (run_dir / "index.html").read_text()
    assert "INTERRUPTED" in index and "NOT RUN" in index and "interrupted</b> by a stop signal" in index


#: Where the second Ctrl-C of a double Ctrl-C lands (the first stops the stage's notebook).
SECOND_STOP = ["none", "papermill-saving", "collecting", "writing-the-report", "releasing"]


@pytest.mark.parametrize("second", SECOND_STOP)
def test_a_double_ctrl_c_leaves_no_partial_notebook_nor_lock(second, stage_dir, tmp_path, monkeypatch):
    """Real SIGINTs, as a terminal sends them, at each point of a stop: the run folder ends
    with the stage INTERRUPTED, its notebook scrubbed into notebooks/, and neither
    ``.partial/`` nor ``.runner.lock`` (both once seen left behind)."""
    import signal

    import papermill

    from hyport_lib.report import stage_run
    from hyport_lib.utils.signals import stop_signals_raise

    monkeypatch.setenv("HF_TOKEN", "hf_doublestopsecret123")

    def ctrl_c(where):
        if where == second:
            os.kill(os.getpid(), signal.SIGINT)

    def executed(source, target, **kwargs):
        nb = nbformat.read(source, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("token = 'hf_doublestopsecret123'"))
        try:
            Path(target).write_text(nbformat.writes(nb))
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C, while a cell runs
        finally:
            ctrl_c("papermill-saving")  # papermill saves the notebook once more on its way out
            Path(target).write_text(nbformat.writes(nb))

    def wrapped(module, name, where, when=lambda *args: True):
        real = getattr(module, name)

        def call(*args, **kwargs):
            if when(*args):
                ctrl_c(where)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)

    monkeypatch.setattr(papermill, "execute_notebook", executed)
    monkeypatch.setattr(runner, "check_before_running", lambda params, stages: [])
    wrapped(stage_run, "scrub_file", "collecting")
    wrapped(runner, "write_run_files", "writing-the-report", lambda run, *_: run.status == "interrupted")
    wrapped(runner, "release_run_folder", "releasing")
    with pytest.raises(KeyboardInterrupt), stop_signals_raise():
        run_report(profile=None, notebooks_dir=stage_dir, only=["01"], output_root=tmp_path / "o",
                   progress=lambda m: None)
    (run_dir,) = (tmp_path / "o").iterdir()
    assert sorted(p.name for p in run_dir.glob(".*")) == []
    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "interrupted" and [s["verdict"] for s in data["stages"]] == ["INTERRUPTED"]
    kept = (run_dir / "notebooks" / "01_good.ipynb").read_text()
    assert "token = " in kept and "hf_doublestopsecret123" not in kept


def test_an_old_parameter_name_is_refused_naming_the_new_one(tmp_path, plant_stage):
    """The project is 0.x: a renamed key has no alias; the old one is refused before
    anything runs, and the error names the new one."""
    plant_stage(tmp_path / "nbs", "01_limit", "print(infer_timeout_s)", infer_timeout_s=300)
    profile = tmp_path / "old.yaml"
    profile.write_text("# hyport report --profile old.yaml\ntimeout_s: 42\n")
    with pytest.raises(ParameterError, match="unknown parameter 'timeout_s'; did you mean 'infer_timeout_s'"):
        run_report(profile=str(profile), notebooks_dir=tmp_path / "nbs", output_root=tmp_path / "o",
                   progress=lambda m: None)
    assert not (tmp_path / "o").exists()


def test_nbconvert_templates_are_found_wherever_pip_put_them(tmp_path, monkeypatch):
    """pip install --target DIR leaves the templates in DIR/share/jupyter, off the data path."""
    import shutil

    import nbconvert
    from jupyter_core import paths

    from hyport_lib.report.stage_run import nbconvert_template_dirs

    target = tmp_path / "target"
    fake_pkg = target / "nbconvert"
    fake_pkg.mkdir(parents=True)
    (fake_pkg / "__init__.py").write_text("")
    real = Path(nbconvert_template_dirs()[0])
    shutil.copytree(real / "lab", target / "share" / "jupyter" / "nbconvert" / "templates" / "lab")
    monkeypatch.setattr(nbconvert, "__file__", str(fake_pkg / "__init__.py"))
    monkeypatch.setattr(paths, "jupyter_path", lambda *parts: [str(tmp_path / "nowhere")])
    assert nbconvert_template_dirs() == [str(target / "share" / "jupyter" / "nbconvert" / "templates")]
    shutil.rmtree(target / "share")
    with pytest.raises(RuntimeError, match="JUPYTER_PATH"):
        nbconvert_template_dirs()


def test_parameters_named_for_tokens_are_kept_and_secret_ones_dropped():
    kept = safe_parameters({"max_new_tokens": 8, "hf_token": "x", "api_key": "y", "db_password": "z",
                            "OPENAI_APIKEY": "w", "tokenizer_path": "/t", "num_cards": 2})
    assert kept == {"max_new_tokens": 8, "tokenizer_path": "/t", "num_cards": 2}


def test_a_secret_parameter_name_in_any_spelling_is_dropped():
    # camelCase as much as snake_case; counting tokens is no secret
    assert safe_parameters({"hfToken": "a", "wandbApiKey": "b", "secretKey": "c", "max_new_tokens": 8}) \
        == {"max_new_tokens": 8}


def _any_path_fields(*names: str) -> dict:
    path = Spec(doc="", path="any")
    return {k: Field(k, "str", True, None, path) for k in names}


def test_a_tilde_is_the_home_folder_not_a_folder_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    merged = resolve_parameters({"model_path": "~/mymodel"}, {}, discover_stages(), base=tmp_path / "cwd").merged
    assert merged == {"model_path": str(tmp_path / "home" / "mymodel")}


def test_null_for_a_path_still_means_none():
    # -p key=null is the way to undo a profile's output_dir
    fields = _any_path_fields("output_dir", "weights_path", "log_dir")
    assert coerce_overrides({"output_dir": "null", "weights_path": "~", "log_dir": "2024"}, fields) == \
        {"output_dir": None, "weights_path": None, "log_dir": "2024"}


def test_zero_stage_2_0_is_stage_2_and_a_fraction_or_a_boolean_is_refused():
    stages = discover_stages()
    assert resolve_parameters({"zero_stage": 2.0}, {}, stages).merged["zero_stage"] == 2
    for bad in (2.5, True):
        with pytest.raises(ParameterError):
            resolve_parameters({"zero_stage": bad}, {}, stages)


@pytest.mark.parametrize("key, value", [("per_device_train_batch_size", 0), ("nnodes", 0),
                                        ("master_port", 99999), ("seed", -1)])
def test_an_out_of_range_training_value_is_refused_by_name(key, value):
    with pytest.raises(ParameterError, match=key):
        resolve_parameters({key: value}, {}, discover_stages())


def test_whether_a_file_exists_is_the_selected_stages_question_not_the_namespaces():
    merged = resolve_parameters({"image": "/nonexistent.png"}, {}, discover_stages()).merged
    assert merged["image"] == "/nonexistent.png"


def test_each_selected_stage_takes_the_typed_values_and_says_what_it_refuses():
    """The namespace takes model_path=None (stage 02 skips its model check then); each stage
    that needs a model says so, before any plan is made, in the words of its own Params."""
    stages = discover_stages()
    params = resolve_parameters({}, {"model_path": "null", "max_steps": "5", "image": "/nonexistent.png"}, stages)
    assert params.merged["max_steps"] == 5 and params.merged["model_path"] is None
    requests = {r.stage: r for r in plan_requests(params, select_stages(stages, ["01", "02", "03"]))}
    required = "model_path=None: a value is required (a non-empty text)"
    assert requests["environment"].refused == [f"01_environment: {required}"]
    assert requests["attention"].refused == [] and requests["attention"].values["model_path"] is None
    assert requests["inference"].refused == [f"03_inference: {required}",
                                             "03_inference: image='/nonexistent.png': no such file"]
    only_04 = plan_requests(params, select_stages(stages, ["04"]))[0]
    assert only_04.refused == [f"04_train: {required}"]
    assert make_plans([requests["environment"]]).refused == requests["environment"].refused  # said, not planned


def test_stage_05_paths_may_be_written_by_the_training_stage_of_the_same_run(tmp_path):
    """A weights_path that does not exist yet is fine when stage 04 runs first and it lies
    inside 04's output_dir; a fractional reload_timeout_s is a number, not a type error."""
    stages = discover_stages()
    out = tmp_path / "train-out"
    params = resolve_parameters({}, {"weights_path": str(out), "checkpoint_path": str(out / "checkpoint-20"),
                                     "output_dir": str(out), "reload_timeout_s": "0.5"}, stages)
    assert params.merged["reload_timeout_s"] == 0.5
    after_04 = {r.stage: r for r in plan_requests(params, select_stages(stages, ["04", "05"]))}
    assert sorted(after_04["weights"].left_to_the_run) == ["checkpoint_path", "weights_path"]
    assert make_plans([after_04["weights"]]).refused == []  # left to 05's own plan
    alone = {r.stage: r for r in plan_requests(params, select_stages(stages, ["05"]))}
    assert alone["weights"].left_to_the_run == []  # no stage 04: 05's plan sees them, and refuses
    assert any("weights_path=" in line and "no such" in line for line in make_plans([alone["weights"]]).refused)
    # the model before fine-tuning is never written by stage 04; nor is a folder outside its
    # output_dir, and without an output_dir no given path can be 04's (a new run folder)
    for given in ({"base_path": str(tmp_path / "bsae")},
                  {"weights_path": str(tmp_path / "elsewhere"), "checkpoint_path": str(tmp_path / "c"),
                   "output_dir": str(out)},
                  {"weights_path": str(tmp_path / "later"), "checkpoint_path": str(tmp_path / "c")}):
        requests = {r.stage: r for r in plan_requests(resolve_parameters({}, given, stages), stages)}
        assert requests["weights"].left_to_the_run == []
        key = next(iter(given))
        refused = make_plans([requests["weights"]]).refused
        assert any(f"{key}=" in line and "no such" in line for line in refused), refused


def test_a_typo_in_a_profile_stops_the_run_and_names_the_key(tmp_path, capsys):
    profile = tmp_path / "typo.yaml"
    profile.write_text("# hyport report --profile typo.yaml\nnum_card: 1\n")
    assert main(["report", "--profile", str(profile), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown parameter 'num_card'" in err and "did you mean 'num_cards'" in err


def test_a_cell_timeout_of_0_is_refused(tmp_path):
    assert main(["report", "--cell-timeout", "0", "--output-dir", str(tmp_path / "o")]) == 2


def test_an_empty_notebooks_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "nbs").mkdir()
    assert main(["report", "--notebooks", str(tmp_path / "nbs"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "no stage notebooks" in capsys.readouterr().err


def test_a_notebook_without_its_package_is_refused_naming_it(tmp_path, capsys):
    """A stage is a notebook plus its package: a notebook alone is a usage error."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    for name in ("01_environment.ipynb", "02_no_package.ipynb"):  # discovery reads names only
        (folder / name).write_text("{}")
    with pytest.raises(ValueError, match="02_no_package.ipynb: no package hyport_lib.no_package"):
        discover_stages(folder)
    assert main(["report", "--notebooks", str(folder), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "02_no_package.ipynb: no package hyport_lib.no_package" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # the report's pre-run plans run in a child process
def test_output_dir_that_is_a_file_or_readonly_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["report", "--only", "01", "--output-dir", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err
    if os.geteuid() != 0:  # root writes anywhere
        readonly = tmp_path / "ro"
        readonly.mkdir(mode=0o500)
        assert main(["report", "--only", "01", "--output-dir", str(readonly)]) == 2


@pytest.mark.slow  # the report's pre-run plans run in a child process
def test_a_model_path_stage_03_would_refuse_stops_the_report_at_once(tmp_path, capsys):
    assert main(["report", "--only", "01,03", "-p", f"model_path={tmp_path / 'nope'}",
                 "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "03_inference: model_path=" in err and not (tmp_path / "out").exists()


def test_a_run_to_compare_with_that_is_not_there_is_one_line_before_anything(tmp_path, capsys):
    assert main(["report", "--only", "01", "--compare", "no-such-run",
                 "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "run 'no-such-run': no such run folder or run id" in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


@pytest.mark.slow  # one stage of a real report run
def test_the_report_writes_its_compare_page_beside_an_earlier_run(tmp_path, capsys):
    earlier = tmp_path / "earlier" / "20990101-000000-abcdef"
    write_record(StageRecord("01_environment", "WARN", "an earlier run"), directory=earlier / "results")
    out = tmp_path / "out"
    assert main(["report", "--only", "01", "--output-dir", str(out), "-p", "device=cpu",
                 "--compare", str(earlier)]) == 0
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    page = (run_dir / "compare.html").read_text()
    assert run_dir.name in page and earlier.name in page and "an earlier run" in page
    assert "Verdict of every stage" in page and "01_environment" in page and "<script" not in page
    assert str(tmp_path) not in page and os.path.realpath(tmp_path) not in page  # no local folder
    assert f"compare: {run_dir / 'compare.html'}" in capsys.readouterr().err


def test_the_compare_run_is_found_where_the_report_writes_and_a_failed_compare_keeps_the_report(
        tmp_path, monkeypatch, capsys):
    """--compare finds report runs under the report's output root (./outputs or --output-dir)
    and interactive runs in their history; a compare that fails after the run is one line,
    and the report keeps its exit status and index line."""
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "home" / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    interactive = read_result(write_record(StageRecord("01_environment", "PASS")))["run_id"]
    earlier = tmp_path / "work" / "outputs" / "20990101-000000-abcdef"
    write_record(StageRecord("01_environment", "WARN"), directory=earlier / "results")
    made = []

    def report_that_records(output_root=None, **_):  # the runner's folders, its stages left out
        run_dir = (output_root or Path.cwd() / "outputs") / f"2099010{2 + len(made)}-000000-new"
        (run_dir / "results").mkdir(parents=True)
        if not made:
            write_record(StageRecord("01_environment", "PASS"), directory=run_dir / "results")
        made.append(run_dir)
        return ReportRun(run_dir.name, run_dir, None, {}, [], {}, "", status="finished")

    monkeypatch.setattr(report_command, "run_report", report_that_records)
    monkeypatch.chdir((tmp_path / "work").resolve())
    assert main(["report", "--only", "01", "--compare", "20990101"]) == 0  # a report run in ./outputs
    assert "20990101-000000-abcdef" in (made[0] / "compare.html").read_text()
    # an interactive run by id with --output-dir elsewhere; this run recorded nothing
    assert main(["report", "--only", "01", "--output-dir", str(tmp_path / "other"), "--compare", interactive]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == str(made[1] / "index.html")
    assert err.count("compare: not written: run ") == 1 and "holds no stage result" in err
    assert not (made[1] / "compare.html").exists()