"""Stage 02's plan decides, with the memory model, which checks fit before anything loads; the
report's pre-check says what it leaves out. On a sparse 7 B checkpoint: plans only, never loaded."""

from __future__ import annotations

import pytest

from hyport_lib.attention import stage
from hyport_lib.attention.params import Params
from hyport_lib.memory import capacity
from hyport_lib.report import runner
from hyport_lib.report.run_parameters import PreRunNotes, make_plans, plan_requests, resolve_parameters
from hyport_lib.stages import discover_stages
from tests.real_size import write_sparse_checkpoint


@pytest.fixture(scope="module")
def sparse_7b(tmp_path_factory):
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B")


@pytest.fixture
def small_host(monkeypatch):
    """A 16 GiB host: a 7 B model fits in bfloat16 (15.2 GiB of weights), not in float32."""
    monkeypatch.setattr(capacity, "host_ram", lambda: (16 * 2 ** 30, "a 16 GiB test host"))


@pytest.fixture
def never_loaded(monkeypatch):
    from transformers import PreTrainedModel

    def refuse(cls, *args, **kwargs):
        raise AssertionError("a plan loaded a model")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


def test_a_plan_leaves_out_the_behaviour_check_the_host_cannot_hold_with_the_figures(
        sparse_7b, small_host, never_loaded):
    plan = stage.plan(Params(device="cpu", model_path=str(sparse_7b), model_dtype="float32", dtypes=["float32"]))
    assert plan.memory is not None and len(plan.left_out) == 1
    left_out = plan.left_out[0]
    assert left_out.startswith("the behaviour check (greedy answers, perplexity) on the whole model: ")
    assert "7.62 B parameters" in left_out and "fp32" in left_out and "32 new tokens" in left_out
    assert "> the host's 16.0 GiB (a 16 GiB test host)" in left_out
    assert "nearest plan that fits: model_dtype=bfloat16 (" in left_out
    assert left_out.endswith("the numerics run on the shrunk model")
    assert plan.memory.lines[0].startswith("behaviour check on the whole model does not fit: ")
    shrunk = plan.memory.lines[-1]
    assert shrunk.startswith("numerics on the shrunk model: ") and " GiB of host RAM" in shrunk
    # in bfloat16 it fits: nothing is left out
    fits = stage.plan(Params(device="cpu", model_path=str(sparse_7b), model_dtype="bfloat16", dtypes=["float32"]))
    assert fits.left_out == [] and fits.memory.lines[0].startswith("behaviour check on the whole model fits: ")


def test_a_card_too_small_for_the_model_is_said_in_card_figures(sparse_7b, monkeypatch, never_loaded):
    """A card's figure where the card cannot be asked: the card_memory_gib parameter."""
    from hyport_lib.memory.fit import Capacity
    from hyport_lib.proof.model_check_memory import plan_check_memory

    monkeypatch.setattr(capacity, "host_ram", lambda: (256 * 2 ** 30, "a 256 GiB test host"))
    found = capacity.capacity(None, card_memory_gib=16)
    assert found == Capacity(16 * 2 ** 30, "card_memory_gib=16", 256 * 2 ** 30, "a 256 GiB test host")
    memory = plan_check_memory(str(sparse_7b), kind="npu", dtype="bfloat16", capacity=found)
    assert "per card > the card's 16.0 GiB (card_memory_gib=16)" in memory.left_out


def test_the_report_pre_check_says_what_stage_02_leaves_out_without_refusing_the_run(
        sparse_7b, small_host, never_loaded):
    """The numerics on the shrunk model always run, so stage 02 is not refused: the pre-check
    says what it leaves out, with the figures, as it says what the host cannot do."""
    stages = discover_stages()
    params = resolve_parameters({}, {"model_path": str(sparse_7b), "device": "cpu", "model_dtype": "float32"},
                                stages)
    requests = [r for r in plan_requests(params, stages) if r.stage == "attention"]
    assert len(requests) == 1 and requests[0].refused == []
    found = make_plans(requests)
    assert found.refused == [] and found.host == []  # nothing the stage fails on
    assert len(found.left_out) == 1 and found.left_out[0].startswith("02_attention leaves out the behaviour check ")
    assert "> the host's 16.0 GiB" in found.left_out[0] and "model_dtype=bfloat16" in found.left_out[0]


class _BeforeTheKernel(Exception):
    pass


def test_the_report_says_stage_02_leaves_a_check_out_and_runs_the_rest(
        sparse_7b, small_host, never_loaded, monkeypatch, tmp_path):
    """Once said as a failure ("the stage will fail on it") though the numerics run."""
    def plans_here(params, selected):  # the pre-check's child would see this host, not the 16 GiB one
        found = make_plans(plan_requests(params, selected))
        return PreRunNotes(found.host, found.left_out)

    def stop(kernel_name):
        raise _BeforeTheKernel

    monkeypatch.setattr(runner, "check_before_running", plans_here)
    monkeypatch.setattr(runner, "check_kernel", stop)
    said = []
    with pytest.raises(_BeforeTheKernel):
        runner.run_report(overrides={"model_path": str(sparse_7b), "device": "cpu", "model_dtype": "float32"},
                          only=["02"], output_root=tmp_path / "out", progress=said.append)
    (note,) = said
    assert note.startswith("note: 02_attention leaves out the behaviour check (greedy answers, perplexity) "
                           "on the whole model: Qwen2.5-7B (7.62 B parameters) does not fit ")
    assert note.endswith("; the numerics run on the shrunk model; the rest of the stage runs")
    assert "will fail" not in note
