"""The form made from a stage's Params: the right control per field, values read as the
command line reads them, each error under its field, Run with the checked values."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import ipywidgets as widgets
import pytest
from IPython.core.interactiveshell import InteractiveShell

import hyport_lib

from hyport_lib.commands import main as cli_main
from hyport_lib.display import VERDICT_COLOURS
from hyport_lib.params import ParameterError, StageParams, model_path_param, param, parameter_fields, parse_text
from hyport_lib.results import StageSummary
from hyport_lib.stages import discover_stages, params_class
from hyport_lib.train.params import SAMPLE_DATASETS
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.workbook import form as form_module
from hyport_lib.workbook.controls import NUMBER_CLASS
from hyport_lib.workbook.form import (StageForm, dataset_entries, model_folders, problem_field, stage_form,
                                      stage_runner)


@dataclass
class Demo(StageParams):
    device: str = param("auto", "where", choices=("auto", "npu", "cuda", "cpu"))
    steps: Optional[int] = param(20, "optimizer steps", min=1)
    shards: int = param(2, "shards", min=1, max=8)
    packing: bool = param(False, "pack samples")
    dtypes: list = param(["float16"], "dtypes")
    model_path: str = model_path_param("a model")
    note: Optional[str] = param(None, "a label")
    rate: Optional[float] = param(None, "a rate; None: the default", min_exclusive=0, group="Training")
    workers: int = param(2, "worker processes", min=1, group="Advanced")

    def check(self) -> None:
        if self.packing and self.device == "cpu":
            raise ParameterError([f"packing=True: not with device={self.device!r}"])


@pytest.fixture(autouse=True)
def fresh_kernel():
    """Each test a fresh kernel: no form remembers what an earlier test typed."""
    form_module.TYPED_VALUES.clear()
    yield
    form_module.TYPED_VALUES.clear()


def _form(namespace=None, run=None) -> StageForm:
    calls = []
    form = stage_form(Demo, dict(namespace or {}), run or (lambda p: calls.append(p) or "done"))
    form.calls = calls
    return form


def test_each_field_gets_the_control_its_declaration_asks_for():
    form = _form()
    kinds = {name: type(row.control) for name, row in form.fields.items()}
    assert kinds == {"device": widgets.Dropdown, "steps": widgets.FloatText, "shards": widgets.FloatText,
                     "packing": widgets.Checkbox, "dtypes": widgets.Textarea,
                     "model_path": widgets.Combobox, "note": widgets.Text, "rate": widgets.FloatText,
                     "workers": widgets.FloatText}
    # the numbers' boxes (<input type=number>), their digits right-aligned (the form's style)
    numbers = {name for name, row in form.fields.items() if NUMBER_CLASS in row.control._dom_classes}
    assert numbers == {"steps", "shards", "rate", "workers"}
    assert any(f".{NUMBER_CLASS} input" in w.value for w in _texts(form.widget) if isinstance(w, widgets.HTML))
    # an optional number has its "None" box; nothing else has one
    assert {name for name, row in form.fields.items() if row.none is not None} == {"steps", "rate"}
    assert form.fields["model_path"].control.options == ("tiny", "smollm2")


def test_untouched_form_gives_the_namespace_values():
    ns = {"device": "cpu", "steps": None, "dtypes": ["bfloat16", "float32"], "note": "x"}
    params = _form(ns).check()
    assert params == Demo(device="cpu", steps=None, dtypes=["bfloat16", "float32"], note="x")


@pytest.mark.parametrize("stage", discover_stages(), ids=lambda s: s.name)
def test_every_stage_form_round_trips_its_defaults(stage, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative default paths are judged here, not in the repo
    cls = params_class(stage)
    defaults = cls().to_dict()
    form = stage_form(cls, dict(defaults), lambda p: None)
    assert form.check().to_dict() == defaults


def test_a_bad_value_shows_the_command_lines_error_under_its_field():
    form = _form()
    form.fields["steps"].control.value = "-3"
    assert form.check() is None
    with pytest.raises(ParameterError) as cli:
        Demo(steps=-3)
    assert form.fields["steps"].problem == str(cli.value)
    assert "&gt;= 1" in form.fields["steps"].error.value  # shown as text, not as markup
    assert form.fields["device"].problem == form.fields["device"].error.value == ""
    assert "1 value to fix" in form.status.value


def test_a_rule_across_fields_is_shown_under_the_field_it_names():
    form = _form()
    form.fields["packing"].control.value = True
    form.fields["device"].control.value = "cpu"
    assert form.check() is None
    assert form.fields["packing"].problem == "packing=True: not with device='cpu'"


def test_text_that_is_no_yaml_is_named():
    form = _form()
    form.fields["dtypes"].control.value = "[float16"
    assert form.check() is None
    assert form.fields["dtypes"].problem.startswith("dtypes='[float16': not valid YAML")


def test_a_number_out_of_range_is_kept_as_typed_for_the_check_to_name():
    form = _form()
    form.fields["shards"].control.value = 70.0
    assert form.fields["shards"].control.value == 70.0  # not clamped to 8
    assert form.check() is None
    with pytest.raises(ParameterError) as cli:
        Demo(shards=70)
    assert form.fields["shards"].problem == str(cli.value)


@pytest.mark.parametrize("given", ["false", "no", 0])
def test_controls_start_from_the_value_as_the_parameter_reads_it(given):
    form = _form({"packing": given, "shards": "3"})
    assert form.fields["packing"].control.value is False and form.fields["shards"].control.value == 3.0
    assert form.check() == Demo(packing=False, shards=3)


def test_a_value_no_control_can_show_is_kept_for_the_check_to_name():
    form = _form({"packing": "maybe", "shards": "many", "steps": 2.5})
    assert form.fields["packing"].control.value == "maybe" and form.fields["shards"].control.value == "many"
    assert form.fields["steps"].control.value == 2.5  # a number box, holding the fraction to be named
    assert form.check() is None
    assert form.fields["packing"].problem.startswith("packing='maybe'")
    assert form.fields["shards"].problem.startswith("shards='many': expected an integer >= 1 and <= 8")
    with pytest.raises(ParameterError) as cli:
        Demo(steps=2.5)
    assert form.fields["steps"].problem == str(cli.value)


def _summary(verdict, summary):
    return StageSummary(verdict=verdict, summary=summary)


def _ran(form: StageForm):
    """Press "Run stage" and wait for the run (a worker thread); its summary, or None."""
    run = form.submit()
    if run is None:
        return None
    assert run.wait(60), "the form run did not end"
    return run.result


def _shown_text(form: StageForm) -> str:
    """The text of the form's output area (its stream outputs)."""
    return "".join(o.get("text", "") for o in form.output.outputs if o["output_type"] == "stream")


def test_run_writes_the_checked_values_back_and_runs_with_them():
    namespace = {"steps": 20}
    seen = []
    form = stage_form(Demo, namespace, lambda p: seen.append(p) or _summary("PASS", "all good"))
    form.fields["steps"].control.value = "7"
    form.fields["note"].control.value = "None"
    assert _ran(form) == _summary("PASS", "all good")
    assert seen == [Demo(steps=7)] and namespace["steps"] == 7 and namespace["note"] is None
    assert "PASS: all good" in form.status.value and not form.button.disabled


@pytest.mark.parametrize("verdict, summary", [("INTERRUPTED", "3 of 20 steps"),
                                              ("FAIL", "rank 1 exited 1\nlong details"),
                                              ("WARN", "2 checks warn")])
def test_the_status_says_the_recorded_verdict_in_its_colour(verdict, summary):
    form = stage_form(Demo, {}, lambda p: _summary(verdict, summary))
    _ran(form)
    assert f"{verdict}: {summary.splitlines()[0]}" in form.status.value
    assert VERDICT_COLOURS[verdict] in form.status.value and "finished" not in form.status.value


def test_run_with_a_bad_value_runs_nothing_and_changes_no_variable():
    namespace = {"steps": 20}
    form = stage_form(Demo, namespace, lambda p: pytest.fail("ran"))
    form.fields["steps"].control.value = "0"
    assert form.submit() is None and namespace == {"steps": 20}


def test_a_run_that_raises_says_so_and_frees_the_button():
    def boom(params):
        raise KeyError("a defect")

    form = stage_form(Demo, {}, boom)
    assert _ran(form) is None and isinstance(form.run.error, KeyError)
    assert "stopped: KeyError" in form.status.value and not form.button.disabled
    assert form.output.outputs[-1]["output_type"] == "error"  # its traceback, in the form's output


@pytest.fixture
def kernel_shell():
    """An active IPython shell, as in a kernel: an Output shows an exception that leaves it,
    and swallows it."""
    shell = InteractiveShell.instance()
    yield shell
    InteractiveShell.clear_instance()


def _refusing(error: Exception):
    def run(params):
        raise error

    return run


def test_in_a_kernel_a_refused_value_is_one_line_under_its_field(kernel_shell):
    # what `hyport train --device npu` on a CPU host says: one line, exit 2
    error = RuntimeError("device='npu' requested but NPU is not usable: no NPU is visible\nmore")
    form = stage_form(Demo, {}, _refusing(error))
    assert _ran(form) is None and not form.button.disabled
    assert form.fields["device"].problem == "device='npu' requested but NPU is not usable: no NPU is visible"
    assert "1 value to fix" in form.status.value and "PASS" not in form.status.value


def test_in_a_kernel_a_refusal_naming_no_field_is_the_status_and_its_details_are_listed(kernel_shell):
    error = ValueError("the dataset has 2 bad records")
    error.details = ["record 3: no answer", "record 9: no turns"]
    form = stage_form(Demo, {}, _refusing(error))
    assert _ran(form) is None
    assert "the dataset has 2 bad records" in form.status.value
    assert all(row.problem == "" for row in form.fields.values())
    assert "record 3: no answer" in _shown_text(form)  # printed into the form's output


def test_in_a_kernel_a_defect_is_shown_and_never_reads_as_finished(kernel_shell):
    form = stage_form(Demo, {}, _refusing(KeyError("a defect")))
    assert _ran(form) is None and not form.button.disabled
    assert "stopped: KeyError" in form.status.value
    assert form.output.outputs[-1]["ename"] == "KeyError"  # the output shows the traceback


def test_the_runner_plans_in_the_form_so_a_plan_refusal_records_nothing(kernel_shell, monkeypatch):
    recorded = []
    monkeypatch.setattr(form_module, "record", lambda stage, result, params=None: recorded.append(result))

    class Stage:
        STAGE = "99_demo"

        @staticmethod
        def plan(params):
            raise ParameterError([f"steps={params.steps}: more than this host can do"])

        run = staticmethod(lambda plan, on_progress=None: pytest.fail("ran"))
        summarize = staticmethod(lambda result: pytest.fail("summarized"))

    form = stage_form(Demo, {}, stage_runner(Stage))
    assert _ran(form) is None and recorded == []
    assert form.fields["steps"].problem == "steps=20: more than this host can do"


def test_an_unknown_choice_in_the_namespace_is_kept_for_the_check_to_name():
    form = _form({"device": "tpu"})
    assert form.fields["device"].control.value == "tpu"
    assert form.check() is None and form.fields["device"].problem.startswith("device='tpu': expected one of")


def test_the_path_note_follows_the_text(tmp_path):
    form = _form()
    row = form.fields["model_path"]
    assert "preset" in row.note.value
    row.control.value = str(tmp_path)
    assert "exists" in row.note.value
    row.control.value = str(tmp_path / "nope")
    assert "not found" in row.note.value
    # the stage's own output folder, not there yet, is one the run makes: never "not found"
    output = stage_form(TrainParams, {"output_dir": str(tmp_path / "new-run")}, lambda p: None).fields["output_dir"]
    assert "the run makes it" in output.note.value and "not found" not in output.note.value


def test_problem_field_names_only_declared_parameters():
    assert problem_field("steps=-3: expected an integer >= 1", ["steps"]) == "steps"
    assert problem_field("batch_prompts[0]='maybe': expected true/false", ["batch_prompts"]) == "batch_prompts"
    assert problem_field("dataset: no entry", ["dataset"]) == "dataset"
    assert problem_field("3 parameters are wrong: x=1", ["steps"]) is None


def test_model_folders_lists_checkpoints_and_follows_no_link_out(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("{}")
    (tmp_path / "org" / "b").mkdir(parents=True)
    (tmp_path / "org" / "b" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    os.symlink(outside, tmp_path / "link")
    assert model_folders(tmp_path) == [str(tmp_path / "a"), str(tmp_path / "org" / "b")]
    assert model_folders(tmp_path / "missing") == []
    form = stage_form(Demo, {}, lambda p: None, models_folder=str(tmp_path))
    assert form.fields["model_path"].control.options == ("tiny", "smollm2", str(tmp_path / "a"),
                                                         str(tmp_path / "org" / "b"))


def test_the_models_folder_box_refreshes_the_model_presets(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    form = _form()
    assert form.models_folder.value == "" and form.fields["model_path"].control.options == ("tiny", "smollm2")
    form.models_folder.value = str(tmp_path)
    assert form.fields["model_path"].control.options == ("tiny", "smollm2", str(tmp_path / "m"))
    assert "1 checkpoint" in form.models_note.value
    form.models_folder.value = str(tmp_path / "nope")
    assert form.fields["model_path"].control.options == ("tiny", "smollm2")
    assert "no such folder" in form.models_note.value


def test_dataset_presets_are_the_shipped_samples_and_the_entries_of_the_named_dataset_info(tmp_path):
    form = stage_form(TrainParams, {}, lambda p: None)
    samples = list(form.fields["dataset_path"].control.options)
    assert str(SAMPLE_DATASETS / "dataset_info.json") in samples and str(SAMPLE_DATASETS / "alpaca.json") in samples
    package = Path(hyport_lib.__file__).parent  # what hyport ships, never a test's data
    assert all(Path(sample).is_relative_to(package) and Path(sample).is_file() for sample in samples)
    assert form.fields["dataset"].control.options == ()
    form.fields["dataset_path"].control.value = str(SAMPLE_DATASETS)  # the json's folder
    offered = form.fields["dataset"].control.options
    assert "guide_chat" in offered and "calc_alpaca" in offered
    assert list(form.fields["dataset"].control.options) == dataset_entries(str(SAMPLE_DATASETS / "dataset_info.json"))
    copy = shutil.copytree(SAMPLE_DATASETS, tmp_path / "data")
    entries = json.loads((copy / "dataset_info.json").read_text())
    entries.update(from_hub={"hf_hub_url": "someone/some-dataset"}, missing_file={"file_name": "not_here.json"})
    (copy / "dataset_info.json").write_text(json.dumps(entries))
    form.fields["dataset_path"].control.value = str(copy)
    offered = form.fields["dataset"].control.options
    # nothing that cannot run here
    assert "guide_chat" in offered and "from_hub" not in offered and "missing_file" not in offered
    (tmp_path / "dataset_info.json").write_text("{not json")
    form.fields["dataset_path"].control.value = str(tmp_path)
    assert form.fields["dataset"].control.options == ()  # nothing offered; the run names the file


def test_the_runner_plans_runs_shows_records_and_says_the_verdict(capsys, monkeypatch):
    calls = []

    def record(stage, result, *, params=None):
        calls.append(("record", result, params.steps))
        return "/results/99_demo.json"

    monkeypatch.setattr(form_module, "record", record)

    class Stage:
        STAGE = "99_demo"

        @staticmethod
        def plan(params):
            calls.append(("plan", params.steps))
            return "plan"

        @staticmethod
        def run(plan, on_progress=None):
            calls.append(("run", plan))
            if on_progress is not None:
                on_progress(SimpleNamespace(running=False))
            return "result"

        @staticmethod
        def summarize(result):
            return SimpleNamespace(verdict="PASS", summary="all good")

    shown = []
    run = stage_runner(Stage, shown.append, progress=lambda p: shown.append)
    assert run(Demo(steps=3)).verdict == "PASS"
    assert calls == [("plan", 3), ("run", "plan"), ("record", "result", 3)]  # recorded with its params
    assert shown[0].running is False and shown[1] == "result"  # the progress display, then the view
    assert capsys.readouterr().out.strip() == "PASS: all good -> /results/99_demo.json"


def test_a_view_that_fails_is_a_defect_with_its_traceback_and_the_result_is_recorded(kernel_shell, monkeypatch):
    recorded = []
    monkeypatch.setattr(form_module, "record",
                        lambda stage, result, params=None: recorded.append(result) or "/r/99_demo.json")

    class Stage:
        STAGE = "99_demo"
        plan = staticmethod(lambda params: "plan")
        run = staticmethod(lambda plan, on_progress=None: "result")
        summarize = staticmethod(lambda result: SimpleNamespace(verdict="PASS", summary="all good"))

    def broken_view(result):
        return "{:.2f}".format(result)  # a display bug: ValueError, which a refusal also is

    form = stage_form(Demo, {}, stage_runner(Stage, broken_view))
    assert _ran(form) is None and recorded == ["result"]  # kept, though not shown
    assert "stopped: ViewFailed" in form.status.value and "/r/99_demo.json" in form.status.value
    assert all(f.problem == "" for f in form.fields.values())  # no value is blamed


def test_a_refusal_quoting_a_secret_is_scrubbed_as_the_command_line_does(kernel_shell, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_SuperSecretValue12345")
    form = stage_form(Demo, {}, _refusing(RuntimeError("steps: the hub refused token hf_SuperSecretValue12345")))
    assert _ran(form) is None
    assert "hf_SuperSecretValue12345" not in form.fields["steps"].problem
    assert "[redacted]" in form.fields["steps"].problem


# --------------------------------------------------------------------------- the layout
def _texts(widget) -> list:
    """Every widget under ``widget``, depth first."""
    found = [widget]
    for child in getattr(widget, "children", ()):
        found.extend(_texts(child))
    return found


def test_the_labels_are_the_full_names_with_the_doc_as_the_pages_tooltip():
    import html as html_module
    import re

    checked = 0
    for stage in discover_stages():
        form = stage_form(params_class(stage), {}, lambda p: None)
        for name, row in form.fields.items():
            shown = html_module.unescape(re.sub(r"<[^>]+>", "", row.label.value))
            assert shown == name  # the whole name, broken (if at all) only after an underscore
            title = re.search(r"title='([^']*)'", row.label.value).group(1)
            assert html_module.unescape(title) == row.field.spec.doc
            # no description of ipywidgets' own (it cuts it, and then the tooltip leaves the input)
            assert row.control.tooltip == row.field.spec.doc and getattr(row.control, "description", "") == ""
            checked += 1
    assert checked >= 100


def test_the_main_fields_come_first_and_the_rest_in_folded_sections():
    form = stage_form(TrainParams, {}, lambda p: None)
    sections = [w for w in form.body.children if isinstance(w, widgets.Accordion)]
    first_section = list(form.body.children).index(sections[0])
    main = [name for name, row in form.fields.items() if row.widget in form.body.children[:first_section]]
    # no more: the browser test checks that Run stage stays in sight (800 px) with the sections folded
    assert {"model_path", "dataset_path", "max_steps", "learning_rate", "finetuning_type", "zero_stage",
            "num_cards", "device", "output_dir"} <= set(main) and len(main) <= 12
    assert [s.titles[0] for s in sections] == ["Data", "Training", "LoRA", "DeepSpeed / memory",
                                               "Several hosts", "Advanced"]
    assert all(s.selected_index is None for s in sections)  # folded: Run stage stays in sight
    in_sections = {name for name, row in form.fields.items()
                   if any(row.widget in _texts(s) for s in sections)}
    assert in_sections | set(main) == set(form.fields) and not in_sections & set(main)
    assert form.fields["offload_optimizer"].widget in _texts(sections[3])
    # the button after every field
    button_row = next(w for w in form.widget.children if form.button in getattr(w, "children", ()))
    assert list(form.widget.children).index(form.body) < list(form.widget.children).index(button_row)


@pytest.mark.parametrize("stage", discover_stages(), ids=lambda s: s.name)
def test_every_stage_has_a_short_main_section_and_folded_ones(stage):
    form = stage_form(params_class(stage), {}, lambda p: None)
    sections = [w for w in form.body.children if isinstance(w, widgets.Accordion)]
    main = [name for name, row in form.fields.items() if row.widget in form.body.children]
    assert sections and 3 <= len(main) <= 12


def test_an_optional_number_says_none_with_the_box_beside_it():
    form = _form({"steps": None})
    row = form.fields["steps"]
    assert row.none.value is True and row.control.disabled and row.value() is None
    row.control.value = 7.0  # a number typed is no longer None
    assert row.none.value is False and not row.control.disabled and row.value() == 7
    row.none.value = True
    assert row.control.disabled and form.check().steps is None
    rate = form.fields["rate"]
    rate.control.value = 0.5
    assert form.check() == Demo(steps=None, rate=0.5)
    rate.control.value = 0.0  # a bounded number: the check's line (as `--rate 0` gets), never a clamp
    with pytest.raises(ParameterError) as cli:
        Demo(rate=0)
    assert form.check() is None and rate.problem == str(cli.value)


def test_a_changed_value_is_checked_at_once_with_the_command_lines_line():
    form = stage_form(TrainParams, {}, lambda p: pytest.fail("ran"))
    form.fields["zero_stage"].control.value = 0  # a dropdown of its choices
    form.fields["offload_optimizer"].control.value = True  # no check() and no Run: the change itself
    with pytest.raises(ParameterError) as cli:
        TrainParams(zero_stage=0, offload_optimizer=True)
    assert form.fields["offload_optimizer"].problem == str(cli.value)
    assert "needs zero_stage 2 or 3" in form.fields["offload_optimizer"].error.value
    assert "1 value to fix" in form.status.value
    form.fields["zero_stage"].control.value = 2  # fixed: the line and the status go
    assert form.fields["offload_optimizer"].problem == "" and form.status.value == ""


def test_a_verdict_in_the_status_stays_when_a_value_changes():
    form = stage_form(Demo, {}, lambda p: StageSummary(verdict="PASS", summary="all good"))
    form.submit()
    form.fields["shards"].control.value = "3"
    assert "PASS: all good" in form.status.value


def _cli_line(command: str, typed: dict, capsys) -> str:
    """What ``hyport <command> --name text ...`` says of ``typed``: its one line, exit 2."""
    argv = [command] + [arg for name, text in typed.items() for arg in (f"--{name.replace('_', '-')}", text)]
    assert cli_main(argv + (["--no-record"] if command != "attention" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hyport {command}: ") and "\n" not in err, err
    return err[len(f"hyport {command}: "):]


@pytest.mark.parametrize("stage, command, typed", [
    ("train", "train", {"save_steps": "2.5"}),  # an IntText read 25
    ("train", "train", {"max_steps": "0"}),
    ("train", "train", {"learning_rate": "0"}),  # a FloatText handed 0.0 over: "learning_rate=0.0"
    ("attention", "attention", {"port_proof_timeout_s": "0"}),
    ("inference", "infer", {"infer_timeout_s": "-1"}),
    ("inference", "infer", {"batch_prompts": "[[a, maybe]]"}),  # the item's index before its "="
])
def test_the_live_check_says_the_command_lines_line_for_the_same_text_under_its_field(stage, command, typed,
                                                                                     capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    (found,) = [s for s in discover_stages() if s.name == stage]
    form = stage_form(params_class(found), {}, lambda p: pytest.fail("ran"))
    for name, text in typed.items():
        form.fields[name].control.value = text  # as the page sends it: the text typed
    (name,) = typed
    assert form.fields[name].problem == _cli_line(command, typed, capsys)


def _field(params_class: type, name: str):
    return next(f for f in parameter_fields(params_class) if f.name == name)


def test_a_number_box_reads_what_is_typed_as_the_command_line():
    form = stage_form(TrainParams, {"seed": 2**60 + 1}, lambda p: None)
    assert isinstance(form.fields["save_steps"].control, widgets.FloatText)  # <input type=number>
    form.fields["save_steps"].control.value = 1e3  # what the page sends for "1e3" (an IntText: 13)
    form.fields["learning_rate"].control.value = 2e-5
    # an integer a browser's number would round stays in a text box, exact
    assert isinstance(form.fields["seed"].control, widgets.Text) and form.fields["seed"].control.value == str(2**60 + 1)
    params = form.check()
    assert (params.save_steps, params.seed, params.learning_rate) == (1000, 2**60 + 1, 2e-5)
    form.fields["save_steps"].control.value = 2.5  # a fraction: the command line's line for `--save-steps 2.5`
    assert form.check() is None
    with pytest.raises(ParameterError) as cli:
        TrainParams(save_steps=parse_text(_field(TrainParams, "save_steps"), "2.5"))
    assert form.fields["save_steps"].problem == str(cli.value)


def test_a_problem_under_a_folded_field_opens_its_section():
    form = _form()
    section = next(w for w in form.body.children if isinstance(w, widgets.Accordion)
                   and form.fields["rate"].widget in _texts(w))
    assert section.selected_index is None
    form.fields["rate"].control.value = "0"
    assert form.fields["rate"].problem.startswith("rate=")
    assert section.selected_index == 0  # unfolded: the line is seen
    form.fields["rate"].control.value = "0.5"
    assert section.selected_index == 0  # left as the user sees it


# --------------------------------------------------------------------------- kept across Run All
def test_values_typed_survive_a_rerun_of_the_parameters_cell_and_the_form():
    cell = {"steps": 20, "note": None, "packing": False}
    first = stage_form(Demo, dict(cell), lambda p: None)
    assert first.kept_line.layout.display == "none"
    first.fields["steps"].control.value = 7.0
    first.fields["note"].control.value = "hello"
    first.fields["packing"].control.value = True
    first.fields["packing"].control.value = False  # typed back to what the cell says: not kept
    namespace = dict(cell)  # Run All: the parameters cell runs again, then the form cell
    again = stage_form(Demo, namespace, lambda p: None)
    assert again.fields["steps"].control.value == 7.0 and again.fields["note"].control.value == "hello"
    assert namespace["steps"] == 7 and namespace["note"] == "hello"  # the cells below run with them
    assert Demo.from_namespace(namespace) == Demo(steps=7, note="hello")
    assert again.kept_line.layout.display == "flex"
    assert again.kept.value == "2 values kept from the form (the parameters cell says steps=20, note=None)"
    again.reset()  # back to the parameters cell
    assert again.fields["steps"].control.value == 20.0 and again.fields["note"].control.value == "None"
    assert namespace == cell and again.kept_line.layout.display == "none"
    assert stage_form(Demo, dict(cell), lambda p: None).fields["steps"].control.value == 20.0  # nothing kept


def test_a_kept_text_that_is_no_yaml_is_kept_as_typed_and_named():
    first = _form()
    first.fields["dtypes"].control.value = "[float16"
    namespace = {}
    again = stage_form(Demo, namespace, lambda p: None)
    assert again.fields["dtypes"].control.value == "[float16" and namespace["dtypes"] == "[float16"
    assert again.fields["dtypes"].problem.startswith("dtypes='[float16': not valid YAML")


def test_a_kept_none_and_a_kept_optional_number():
    first = _form({"steps": 20})
    first.fields["steps"].none.value = True
    namespace = {"steps": 20}
    again = stage_form(Demo, namespace, lambda p: None)
    assert again.fields["steps"].none.value is True and namespace["steps"] is None
    assert "steps=20" in again.kept.value


def _runs_here(values) -> tuple:
    """What a made-up backend runs: "fused" on an NPU only (as attention_offered says it)."""
    return ("auto", "eager") + (("fused",) if values.get("device") == "npu" else ())


@dataclass
class Offered(StageParams):
    device: str = param("auto", "where", choices=("auto", "npu", "cuda", "cpu"))
    attention: str = param("eager", "the attention", offered=_runs_here)
    note: Optional[str] = param(None, "a label", offered=lambda values: ("a", "b"))


def test_what_a_field_offers_is_a_dropdown_that_follows_the_values_and_the_check_still_decides():
    form = stage_form(Offered, {"attention": "fused"}, lambda p: None)
    attention = form.fields["attention"].control
    assert isinstance(attention, widgets.Dropdown)
    # a value not offered here is kept as given, last, not replaced
    assert [label for label, _ in attention.options] == ["auto", "eager", "'fused'"] and attention.value == "fused"
    form.fields["device"].control.value = "npu"  # now it is offered, in its place
    assert [label for label, _ in attention.options] == ["auto", "eager", "fused"] and attention.value == "fused"
    attention.value = "auto"
    form.fields["device"].control.value = "cpu"
    assert [label for label, _ in attention.options] == ["auto", "eager"] and attention.value == "auto"
    note = form.fields["note"].control  # an optional field offers None as the text "None", never blank
    assert [label for label, _ in note.options] == ["a", "b", "None"] and note.label == "None"
    assert form.check().note is None


def test_the_attention_dropdown_of_each_stage_lists_what_this_backend_runs_auto_first():
    """05's reload only loads the model: on a CPU it takes flex_attention, which 03 and 04 cannot run."""
    from hyport_lib.npu_attention.runnable import attention_choices

    stages = [stage for stage in discover_stages() if stage.name in ("inference", "train", "weights")]
    assert len(stages) == 3
    for stage in stages:
        name = stage.name
        offered = attention_choices("cpu", work={"inference": "generate", "train": "train", "weights": "load"}[name])
        assert offered[0] == "auto" and "eager" in offered and "flash_attention_2" not in offered
        assert ("flex_attention" in offered) == (name == "weights"), name
        form = stage_form(params_class(stage), {"device": "cpu"}, lambda p: None)
        control = form.fields["attn_implementation"].control
        assert isinstance(control, widgets.Dropdown), name
        values = [value for _, value in control.options]
        assert values[:len(offered)] == list(offered) and ("flex_attention" in values) == (name == "weights"), name


def test_a_line_that_stays_is_not_blanked_by_the_next_check():
    form = _form()
    form.fields["steps"].control.value = "0"  # the check on the change says it
    shown = []
    form.fields["steps"].error.observe(lambda change: shown.append(change["new"]), names="value")
    assert form.check() is None  # Run's check: the same line, never a blank in between
    assert shown == [] and form.fields["steps"].problem.startswith("steps=0")


def _rebuilt_with_a_kept_value(cell: dict) -> StageForm:
    """A form whose ``steps`` was typed, built again by a Run All (the parameters cell ``cell``)."""
    _form(cell).fields["steps"].control.value = "7"
    form = stage_form(Demo, cell, lambda p: None)
    assert form.kept_line.layout.display == "flex"
    return form


def test_reset_keeps_the_models_folder_row():
    form = _rebuilt_with_a_kept_value(Demo().to_dict())
    assert form.models_folder is not None and form._models_row in _texts(form.widget)
    form.reset()
    assert form._models_row in _texts(form.widget)  # still offered


def test_reset_goes_back_to_every_value_of_the_parameters_cell():
    cell = Demo(steps=20, rate=None).to_dict()  # the parameters cell sets every parameter
    namespace = dict(cell)
    form = _rebuilt_with_a_kept_value(namespace)
    form.fields["rate"].control.value = "0.5"  # typed since Run All: not the parameters cell's either
    form.fields["shards"].control.value = "3"
    form.reset()
    assert [form.fields[name].value() for name in ("steps", "rate", "shards")] == [20, None, 2]
    assert form.check() == Demo(steps=20, rate=None)
    assert namespace["steps"] == 20 and namespace["rate"] is None and namespace["shards"] == 2
    assert form_module.TYPED_VALUES.get(Demo) is None
    again = stage_form(Demo, dict(cell), lambda p: None)  # the next Run All keeps nothing
    assert again.fields["rate"].none.value is True and again.kept_line.layout.display == "none"


def test_an_option_the_form_offers_anew_is_not_recorded_as_typed():
    form = stage_form(Offered, {"attention": "eager"}, lambda p: None)
    passed = []
    form.fields["attention"].control.observe(lambda change: passed.append(change["new"]), names="value")
    form.fields["device"].control.value = "npu"  # offers "fused" too: the options are replaced
    assert passed and form.fields["attention"].control.value == "eager"  # it did pass through others
    assert form_module.TYPED_VALUES[Offered] == {"device": "npu"}
    form.fields["device"].control.value = "auto"
    namespace = {"attention": "auto"}  # the parameters cell now says auto; Run All
    again = stage_form(Offered, namespace, lambda p: None)
    assert again.fields["attention"].control.value == "auto" and namespace["attention"] == "auto"
    assert again.kept_line.layout.display == "none"


def test_a_value_a_form_run_wrote_back_is_not_said_as_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    namespace = TrainParams().to_dict()  # the parameters cell ran
    form = stage_form(TrainParams, namespace, lambda p: _summary("PASS", "ok"))
    form.fields["output_dir"].control.value = "~/runs/a"
    assert _ran(form) == _summary("PASS", "ok")
    assert namespace["output_dir"] == str(tmp_path / "runs" / "a")  # written back read: "~" expanded
    again = stage_form(TrainParams, namespace, lambda p: None)  # the form's cell alone, run again
    assert again.kept_line.layout.display == "none" and again.kept.value == ""
    assert again.check().output_dir == str(tmp_path / "runs" / "a")
