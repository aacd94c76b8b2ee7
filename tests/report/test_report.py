"""``hyport report`` and its runner (hyport_lib/report/runner.py) on planted stages: stage
selection, failing, hung and stopped stages, the files a run leaves, the command's checks
before anything runs and its compare page."""

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
from hyport_lib.params import ParameterError
from hyport_lib.report import runner
from hyport_lib.report.run import ReportRun
from hyport_lib.report.run_parameters import PreRunNotes
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


def test_stage_selection(stage_dir):
    stages = discover_stages(stage_dir)
    assert [s.id for s in stages] == ["01_good", "02_boom", "03_after"]
    assert [s.id for s in select_stages(stages, ["1", "03"])] == ["01_good", "03_after"]
    assert [s.id for s in select_stages(stages, ["boom"])] == ["02_boom"]
    with pytest.raises(ValueError, match="07"):
        select_stages(stages, ["07"])


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
    monkeypatch.setattr(runner, "check_before_running", lambda params, stages: PreRunNotes([], []))
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
    monkeypatch.setattr(runner, "check_before_running", lambda params, stages: PreRunNotes([], []))
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
    # the index and report.html, written before the page, are written again to link it
    for name in ("index.html", "report.html"):
        assert '<a href="compare.html">' in (run_dir / name).read_text(), name


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
