"""The one stage contract and the one parameter class per stage.

Every discovered stage has a package named as its notebook with ``params.Params`` (the
only declaration of its parameters) and ``stage.py`` with ``RESULT`` (its result's
dataclass, which :func:`hyport_lib.results.record` writes and the report reads back),
``plan(params)``, ``run(plan, *, on_progress=None)`` and ``summarize(result)``, and no
``record`` of its own. The notebook's ``parameters`` cell holds the same
names and default literals as ``Params``; the command's flags are ``Params``' fields;
and a bad value gives the same one-line error from the notebook, the command line and
``hyport report``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
import yaml

from hyport_lib.commands import COMMANDS, build_parser, command_target, main
from hyport_lib.commands._stage import StageCommand
from hyport_lib.params import ParameterError, StageParams, markdown_table, parameter_fields
from hyport_lib.report.blog import cli_value
from hyport_lib.report.run_parameters import (check_before_running, make_plans, parse_overrides, plan_requests,
                                              resolve_parameters)
from hyport_lib.stages import StageContract, discover_stages, params_class, stage_part
from hyport_lib.utils.typed_records import from_mapping

REPO = Path(__file__).resolve().parents[1]
STAGES = discover_stages()


def _cell(path: Path) -> dict:
    """The ``parameters`` cell's names -> default literals, read as papermill reads it."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    out = {}
    for node in ast.parse("".join(cells[0]["source"])).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, \
            f"{path.name}: the parameters cell holds assignments of literals only"
        out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def _code(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.id)
def test_the_stage_package_is_named_as_its_notebook_and_keeps_the_contract(stage):
    module = stage_part(stage.name, "stage")
    assert module is not None, f"{stage.path.name}: no package hyport_lib.{stage.name} with a stage.py"
    assert isinstance(module, StageContract), f"{stage.id}: STAGE, RESULT, plan, run, summarize"
    assert module.__name__ == f"hyport_lib.{stage.name}.stage" and module.STAGE == stage.id
    cls = params_class(stage)
    assert cls is not None and issubclass(cls, StageParams), f"hyport_lib.{stage.name}.params.Params"
    plan = inspect.signature(module.plan).parameters
    assert list(plan) == ["params"], f"{stage.id}: plan(params)"
    run = inspect.signature(module.run).parameters
    first, *rest = run.values()
    assert first.name == "plan" and [p.name for p in rest] == ["on_progress"], f"{stage.id}: run(plan, *, on_progress)"
    assert rest[0].kind is inspect.Parameter.KEYWORD_ONLY and rest[0].default is None
    assert list(inspect.signature(module.summarize).parameters) == ["result"]
    # one writer for every stage (results.record); the result reads back from any record
    assert not hasattr(module, "record"), f"{stage.id}: results.record writes the result"
    assert dataclasses.is_dataclass(module.RESULT), f"{stage.id}: RESULT, the result's dataclass"
    assert isinstance(from_mapping(module.RESULT, {}), module.RESULT), f"{stage.id}: an empty record reads"


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.id)
def test_the_notebook_cell_declares_exactly_the_params_fields_with_their_defaults(stage):
    cell = _cell(stage.path)
    fields = {f.name: f.default for f in parameter_fields(params_class(stage))}
    assert list(cell) == list(fields), f"{stage.path.name}: the cell's names, in the class's order"
    differ = {k: (cell[k], fields[k]) for k in fields if cell[k] != fields[k] or type(cell[k]) is not type(fields[k])}
    assert not differ, f"{stage.path.name}: cell default vs Params default: {differ}"


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.id)
def test_the_notebook_builds_its_params_in_one_line_and_calls_the_contract(stage):
    code = _code(stage.path)
    assert re.search(r"^params = Params\.from_namespace\(globals\(\)\)$", code, re.MULTILINE), stage.path.name
    # the record keeps the parameters the stage ran with (the history compares them)
    assert "stage.plan(params)" in code, f"{stage.path.name}: no stage.plan(params)"
    assert re.search(r"record\(stage, \w+, params=params\)", code), \
        f"{stage.path.name}: no record(stage, ..., params=params)"
    # the run, directly or stoppable (the partial result of a stop instead of a traceback)
    assert "stage.run(" in code or "run_stoppable(stage.run," in code, f"{stage.path.name}: no stage.run"
    assert "get_backend(" not in code, f"{stage.path.name}: the plan resolves the backend, not the notebook"


def test_every_stage_has_a_command_whose_flags_are_its_params_fields():
    by_stage = {}
    for name in COMMANDS:
        target = command_target(name)
        if isinstance(target, StageCommand):
            by_stage[target.contract.STAGE] = name
    assert set(by_stage) == {s.id for s in STAGES}, "each stage has one stage command in the registry"
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for stage in STAGES:
        name = by_stage[stage.id]
        dests = {a.dest for a in subparsers[name]._actions}
        missing = [f.name for f in parameter_fields(params_class(stage))
                   if f.name not in dests]
        assert not missing, f"hyport {name}: no flag for {missing}"


def test_a_key_several_stages_declare_is_declared_alike_but_for_none():
    """The report types a shared key once, by one field (resolve_parameters), and each
    stage's Params takes the value as typed (StageParams.from_typed): the stages may word
    its doc their own way, place it in a section of their own (its group), offer the form's
    dropdown what their own plan accepts (offered: 03 generates, 04 trains, 05 loads) and
    differ in taking None (each says so itself), nothing else."""
    by_name: dict[str, list] = {}
    for stage in STAGES:
        for f in parameter_fields(params_class(stage)):
            by_name.setdefault(f.name, []).append(f)
    shared = {name: fields for name, fields in by_name.items() if len(fields) > 1}
    assert {"device", "model_path"} <= set(shared)
    for name, fields in shared.items():
        alike = {(f.kind, dataclasses.replace(f.spec, doc="", group="", offered=None)) for f in fields}
        assert len(alike) == 1, f"{name}: declared differently by the stages: {alike}"


def test_the_docs_parameter_table_is_current():
    """docs/parameters.md is generated from the classes (scripts/write_parameter_docs.py)."""
    text = (REPO / "docs" / "parameters.md").read_text(encoding="utf-8")
    assert {"01_environment", "05_weights"} <= {s.id for s in STAGES}
    for stage in STAGES:
        assert markdown_table(params_class(stage)) in text, \
            f"docs/parameters.md is stale for {stage.id}: run python scripts/write_parameter_docs.py"


# --------------------------------------------------------------------------- one validation path
BAD_VALUES = [  # (stage, command argv, key, value, the one line every front end says)
    ("04_train", ["train", "--max-steps", "0"], "max_steps", "0", "max_steps=0: expected an integer >= 1 (or null)"),
    ("03_inference", ["infer", "--max-new-tokens", "many"], "max_new_tokens", "many",
     "max_new_tokens='many': expected an integer >= 1"),
    ("05_weights", ["verify", "--checksum", "md5"], "checksum", "md5", "checksum='md5': expected one of 'xxh3', 'crc32', 'sha256'"),
]


@pytest.mark.slow  # papermill starts a kernel
@pytest.mark.parametrize("stage_id, argv, key, value, said", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_bad_value_gives_the_same_error_from_notebook_command_and_report(stage_id, argv, key, value, said,
                                                                            tmp_path, capsys):
    import papermill

    # the report, before anything runs
    with pytest.raises(ParameterError) as info:
        check_before_running(resolve_parameters({}, {key: value}, STAGES), STAGES)
    assert said in str(info.value) + " ".join(info.value.details)
    # the command line: a usage error, exit 2, the same line
    assert main(argv) == 2
    assert said in capsys.readouterr().err
    # the notebook, given the value as papermill's own -p types it
    stage = next(s for s in STAGES if s.id == stage_id)
    with pytest.raises(papermill.PapermillExecutionError) as failed:
        papermill.execute_notebook(str(stage.path), str(tmp_path / "out.ipynb"), parameters={key: yaml.safe_load(value)},
                                   cwd=str(stage.path.parent), progress_bar=False,
                                   execution_timeout=300)
    assert said in str(failed.value)


def test_the_drafts_reproduce_command_gives_the_same_parameters_back():
    """The blog draft writes the run as ``hyport report -p key=value ...``: those words,
    read back by the report, must give the same values (None included)."""
    given = {"max_steps": None, "num_cards": 2, "dtypes": ["float32"], "packing": False,
             "single_prompt": "yes", "output_dir": None, "learning_rate": 1e-4, "seed": 3}
    merged = resolve_parameters({}, given, STAGES).merged
    words = [f"{key}={cli_value(value)}" for key, value in merged.items()]
    assert resolve_parameters({}, parse_overrides(words), STAGES).merged == merged


def test_what_the_host_cannot_do_does_not_stop_the_run_but_a_bad_value_does():
    """device='npu' on a host without one is the host's state: stage 01 must still run and
    explain it, so the pre-run plans say it without refusing the run; a bad value in the
    same run is refused."""
    selected = [s for s in STAGES if s.name in ("attention", "inference")]
    requests = plan_requests(resolve_parameters({}, {"device": "npu"}, STAGES), selected)
    found = make_plans(requests)
    assert found.refused == []
    assert [line.split(":")[0] for line in found.host] == [s.id for s in selected]
    assert all("npu" in line.lower() for line in found.host)
    bad = plan_requests(resolve_parameters({}, {"device": "npu", "seed": 1, "code_path": "/no/such"}, STAGES),
                        selected)
    assert make_plans(bad).refused == ["02_attention: code_path='/no/such': no such file or folder"]
