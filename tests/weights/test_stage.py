"""Stage 05's contract (:mod:`hyport_lib.weights.stage`): the plan writes nothing and refuses
what cannot be checked, the run names each step."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.train.result import TrainResult
from hyport_lib.weights import stage
from hyport_lib.weights.params import Params


@pytest.fixture(scope="module")
def tiny():
    return ensure_tiny_model()


def test_the_plan_names_the_tiny_stand_in_without_building_it(tmp_path, monkeypatch):
    """hyport report plans every stage before any runs: naming the tiny model writes nothing;
    the run builds it."""
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    plan = stage.plan(Params())
    assert plan.sources.tiny and "no stage 04 result" in plan.sources.note
    assert plan.params.reload_timeout_s == 600.0 and plan.log_dir is None
    assert not (tmp_path / "cache").exists() and not (tmp_path / "results").exists()


def test_the_plan_refuses_what_cannot_be_checked_in_one_line_each(tmp_path, tiny):
    from hyport_lib.params import ParameterError
    headers_only = {"full_scan": False, "reload": False, "logits_parity": False, "consolidate_zero": False}
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ParameterError, match=f"^weights_path={re.escape(repr(missing))}: no such file or folder$"):
        stage.plan(Params(weights_path=missing, **headers_only))
    with pytest.raises(ParameterError, match=f"^checkpoint_path={re.escape(repr(missing))}: no such file or folder$"):
        stage.plan(Params(weights_path=str(tiny), checkpoint_path=missing, **headers_only))
    # a path the system refuses to look up (ENAMETOOLONG) is no folder, never an internal error
    too_long = str(tmp_path / ("a" * 300))
    with pytest.raises(ParameterError, match=f"^weights_path={re.escape(repr(too_long))}: no such file or folder$"):
        stage.plan(Params(weights_path=too_long, **headers_only))
    # a check that needs a checkpoint, without one: refused, never a PASS that left it out
    with pytest.raises(ParameterError) as caught:
        Params(weights_path=str(tiny))  # the notebook's defaults: every check on
    assert str(caught.value) == (
        "logits_parity=True compares the logits with a checkpoint's, and there is none: give "
        "checkpoint_path or set logits_parity=False")  # refused as given: nothing is guessed
    with pytest.raises(ParameterError) as caught:
        stage.plan(Params(weights_path=str(tiny), logits_parity=False))
    assert str(caught.value) == (
        "consolidate_zero=True consolidates a checkpoint's ZeRO states, and there is none: give "
        "checkpoint_path or set consolidate_zero=False")
    plan = stage.plan(Params(weights_path=str(tiny), **headers_only))
    assert (plan.sources.weights, plan.sources.checkpoint, plan.sources.tiny) == (str(tiny), None, False)
    # a Trainer checkpoint given as the weights holds its own ZeRO states
    trainer_checkpoint = shutil.copytree(tiny, tmp_path / "checkpoint-2")
    (trainer_checkpoint / "global_step2").mkdir()
    plan = stage.plan(Params(weights_path=str(trainer_checkpoint), **{**headers_only, "consolidate_zero": True}))
    assert (plan.sources.weights, plan.sources.checkpoint) == (str(trainer_checkpoint), None)


def test_on_a_node_above_0_the_stage_is_skip_and_says_node_0_has_the_weights(tmp_path, monkeypatch):
    """Stage 04's hand-over of node 1 of 2 (no final weights: node 0 holds them): SKIP, never
    the refusal 'stage 04 trained no weights' nor the tiny model in their place."""
    from hyport_lib.results import StageRecord, TrainedWeights, load_record, record, write_record
    from hyport_lib.utils.typed_records import to_mapping

    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    # stage 04's own result, as node 1 records it: the hand-over reads the keys it writes
    handed = TrainResult(status="ok", model_path="/models/x", nnodes=2, node_rank=1)
    write_record(StageRecord("04_train", "PASS", "node 1 of 2 trained", data=to_mapping(handed)), directory=results)
    plan = stage.plan(Params())  # logits_parity and consolidate_zero on: nothing to refuse here
    assert plan.sources.skip and not plan.sources.tiny
    result = stage.run(plan)
    summary = stage.summarize(result)
    assert summary.verdict == "SKIP"
    assert summary.summary.startswith("stage 05 runs on node 0 (the job's weights and checkpoints are there): "
                                      "stage 04's record here is node 1's of 2")
    recorded = load_record(record(stage, result, directory=results), stage.RESULT)
    assert recorded.verdict == "SKIP" and recorded.data.skipped == summary.summary
    # node 0's hand-over is checked as before
    write_record(StageRecord("04_train", "FAIL", "no weights", data=to_mapping(TrainedWeights(nnodes=2))),
                 directory=results)
    with pytest.raises(ValueError, match="stage 04 trained no weights"):
        stage.plan(Params())


def _zero_checkpoint(tmp_path, model_states: dict, ranks: list[int], marker: dict | None = None):
    """``checkpoint-<step>`` as DeepSpeed and stage 04 leave it: ``latest``, the model states, one
    (empty) optimizer-state file per rank in ``ranks``, a weight file and hyport's marker when given."""
    import json

    import torch
    from safetensors.torch import save_file

    step = model_states.get("global_steps", 2)
    checkpoint = tmp_path / f"checkpoint-{step}"
    states = checkpoint / f"global_step{step}"
    states.mkdir(parents=True)
    (checkpoint / "latest").write_text(f"global_step{step}")
    torch.save(model_states, states / "mp_rank_00_model_states.pt")
    for rank in ranks:
        (states / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    save_file({"w": torch.zeros(2)}, str(checkpoint / "model.safetensors"))
    if marker is not None:
        (checkpoint / "hyport_checkpoint.json").write_text(json.dumps(marker))
    return checkpoint


def _verified(checkpoint, monkeypatch, consolidate_zero=True):
    """Stage 05 on ``checkpoint`` (headers and ZeRO states only); consolidating it fails the test."""
    def never(*args, **kwargs):
        raise AssertionError("consolidate() was called on an incomplete checkpoint")

    monkeypatch.setattr(stage, "consolidate", never)
    params = Params(weights_path=str(checkpoint), full_scan=False, reload=False, logits_parity=False,
                    consolidate_zero=consolidate_zero)
    result = stage.run(stage.plan(params))
    incomplete = [f for f in result.findings if f.cls == "zero_incomplete"]
    assert len(incomplete) == 1 and "\n" not in incomplete[0].message, [f.message for f in result.findings]
    assert result.zero_compare is None
    return result, incomplete[0]


ZERO2 = {"mp_world_size": 1, "global_steps": 2, "ds_config": {"zero_optimization": {"stage": 2}}}


def test_an_incomplete_checkpoint_is_said_in_one_line_and_never_consolidated(tmp_path, monkeypatch):
    """DeepSpeed's states written for 2 ranks, rank 1's optimizer file missing (a rank that did
    not finish saving, or a node's storage not shared): no zero_to_fp32 on it."""
    checkpoint = _zero_checkpoint(tmp_path, {**ZERO2, "dp_world_size": 2}, ranks=[0])
    result, incomplete = _verified(checkpoint, monkeypatch)
    assert "missing [1]" in incomplete.message
    assert incomplete.message.endswith("; not consolidated: only a complete checkpoint is")
    assert stage.summarize(result).verdict == "FAIL"


NODE_0_OF_2 = {"step": 4, "world_size": 4, "zero_stage": 2, "finetuning_type": "full",
               "storage": "node_local", "ranks": [0, 1]}


@pytest.mark.parametrize("recorded", ["dp_world_size", "marker_world_size"])
def test_a_node_local_checkpoint_holding_part_of_the_ranks_is_never_consolidated(recorded, tmp_path, monkeypatch):
    """Node 0's folder under storage='node_local' (2 nodes x 2 ranks): ranks 0-1 of 4, the high
    ranks on node 1. The world size is what DeepSpeed recorded, else hyport's marker, never the
    highest rank present + 1 (which would call ranks 0-1 whole)."""
    model_states = {**ZERO2, "global_steps": 4}
    if recorded == "dp_world_size":
        model_states["dp_world_size"] = 4
    checkpoint = _zero_checkpoint(tmp_path, model_states, ranks=[0, 1], marker=NODE_0_OF_2)
    result, incomplete = _verified(checkpoint, monkeypatch)
    assert incomplete.message == ("checkpoint-4 holds the ZeRO states of ranks 0-1 of 4 (node-local storage: "
                                  "the other nodes keep theirs); not consolidated: only a complete checkpoint is")
    assert incomplete.severity == "error" and stage.summarize(result).verdict == "FAIL"
    assert result.zero.world_size == 4 and result.zero.ranks == [0, 1]
    # not asked to consolidate: the folder is as node-local storage leaves it, a warning
    (tmp_path / "again").mkdir()
    checkpoint = _zero_checkpoint(tmp_path / "again", model_states, ranks=[0, 1], marker=NODE_0_OF_2)
    result, incomplete = _verified(checkpoint, monkeypatch, consolidate_zero=False)
    assert incomplete.severity == "warning" and "not consolidated" not in incomplete.message
    assert not [f for f in result.findings if f.cls.startswith("zero") and f.severity == "error"]


@pytest.mark.parametrize("marker, ranks, said", [
    ({**NODE_0_OF_2, "ranks": [0, 1]}, [0], "checkpoint-4 should hold the ZeRO states of ranks 0-1 of 4 "
                                            "(node-local storage) but optimizer states exist for rank 0: missing [1]"),
    ({**NODE_0_OF_2, "storage": "shared", "ranks": [0, 1, 2, 3]}, [0, 1],
     "written for 4 ranks but optimizer states exist for ranks 0-1: missing [2, 3]"),
    (None, [0, 1], "checkpoint-4's world size is recorded nowhere (no dp_world_size in "
                   "mp_rank_00_model_states.pt, no hyport_checkpoint.json)"),
    ({**NODE_0_OF_2, "world_size": 2}, [0, 1], None),
], ids=["node-local-rank-missing", "shared-high-ranks-missing", "world-size-unrecorded", "complete"])
def test_the_world_size_is_the_recorded_one_never_the_highest_rank_present(marker, ranks, said, tmp_path,
                                                                            monkeypatch):
    """Without dp_world_size in the model states: the marker's world size, and the ranks it says
    this folder holds; neither recorded: completeness cannot be told, so nothing is consolidated."""
    checkpoint = _zero_checkpoint(tmp_path, {**ZERO2, "global_steps": 4}, ranks=ranks, marker=marker)
    if said is None:  # a world of 2 with ranks 0-1: whole, handed to zero_to_fp32
        handed = []
        monkeypatch.setattr(stage, "consolidate", lambda *args, **kwargs: handed.append(args) or _Stop())
        with pytest.raises(_Stopped):
            stage.run(stage.plan(Params(weights_path=str(checkpoint), full_scan=False, reload=False,
                                        logits_parity=False, consolidate_zero=True)))
        assert len(handed) == 1
        return
    result, incomplete = _verified(checkpoint, monkeypatch)
    assert incomplete.message.startswith(said), incomplete.message
    assert incomplete.message.endswith("; not consolidated: only a complete checkpoint is")
    assert stage.summarize(result).verdict == "FAIL"


def test_a_marker_contradicting_deepspeeds_world_size_is_never_consolidated(tmp_path, monkeypatch):
    checkpoint = _zero_checkpoint(tmp_path, {**ZERO2, "global_steps": 4, "dp_world_size": 2}, ranks=[0, 1],
                                  marker=NODE_0_OF_2)
    result, incomplete = _verified(checkpoint, monkeypatch)
    assert incomplete.message.startswith(
        "global_step4/ was written for dp_world_size 2 (mp_rank_00_model_states.pt) but hyport_checkpoint.json "
        "says world_size 4: which ranks make it whole cannot be told")


class _Stopped(Exception):
    pass


def _Stop():
    raise _Stopped("consolidate() reached")


def test_after_a_stopped_stage_04_the_stage_is_skip_in_one_line_that_says_what_to_do(tmp_path, monkeypatch,
                                                                                     capsys):
    """Stage 04 stopped after step 3 (its own interrupt path, recorded as the notebook and the
    command record it): no ValueError, a SKIP that names the step, the missing weights and
    what to do, from the plan, the notebook's cells and ``hyport verify`` alike."""
    from hyport_lib.commands import main
    from hyport_lib.results import load_record, record
    from hyport_lib.train import stage as train_stage
    from stopped_training import stopped_after

    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    monkeypatch.delenv("HYPORT_RUN_DIR", raising=False)
    assert load_record(record(train_stage, stopped_after(tmp_path, 3), directory=results)).verdict == "INTERRUPTED"
    said = ("stage 04 was interrupted (stopped by a signal after step 3): it wrote no final weights to check; "
            "run stage 04 to the end, or set weights_path to a folder to check")
    plan = stage.plan(Params())
    assert plan.sources.skip == said and not plan.sources.tiny
    summary = stage.summarize(stage.run(plan))
    assert (summary.verdict, summary.summary) == ("SKIP", said)
    assert main(["verify", "--no-record"]) == 0
    out, err = capsys.readouterr()
    assert said in out + err and "Traceback" not in out + err
    # a last complete checkpoint is named as the folder to give instead
    from hyport_lib.results import TrainedWeights
    from hyport_lib.weights.defaults import _interrupted

    assert _interrupted(TrainedWeights(last_checkpoint="/r/checkpoint-2", reason="stopped by a signal after "
                                       "step 2 (metrics and complete checkpoints kept)")).endswith(
        "or set weights_path='/r/checkpoint-2' to check its last complete checkpoint")


@pytest.mark.slow  # papermill starts a kernel
def test_notebook_05_run_all_after_a_stopped_stage_04_ends_in_one_skip_line(tmp_path, monkeypatch):
    """Run All of notebook 05 (papermill, in notebooks/ as JupyterLab runs it) after stage 04
    was stopped: no traceback, the plan cell and the summary say the one SKIP line, the
    record is SKIP."""
    import json

    import papermill

    from hyport_lib.results import record
    from hyport_lib.train import stage as train_stage
    from hyport_lib.weights.show import __file__ as show_file
    from stopped_training import stopped_after

    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    monkeypatch.delenv("HYPORT_RUN_DIR", raising=False)
    record(train_stage, stopped_after(tmp_path, 3), directory=results)
    notebooks = Path(show_file).resolve().parents[2] / "notebooks"
    papermill.execute_notebook(str(notebooks / "05_weights.ipynb"), str(tmp_path / "out.ipynb"),
                               cwd=str(notebooks), progress_bar=False, execution_timeout=300)
    outputs = [o for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"] for o in c.get("outputs", [])]
    assert outputs and not [o for o in outputs if o["output_type"] == "error"]
    shown = [str(o.get("data", {}).get("text/markdown") or o.get("text")) for o in outputs]
    said = "stage 04 was interrupted (stopped by a signal after step 3): it wrote no final weights to check"
    assert sum(said in text for text in shown) == 3  # the plan cell, the summary, the recorded line
    assert json.loads((results / "05_weights.json").read_text())["verdict"] == "SKIP"
