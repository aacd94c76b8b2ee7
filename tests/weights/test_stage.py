"""Stage 05's contract (:mod:`hyport_lib.weights.stage`): the plan writes nothing and refuses
what cannot be checked, the run names each step."""

from __future__ import annotations

import re
import shutil

import pytest

from hyport_lib.models.tiny import ensure_tiny_model
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
