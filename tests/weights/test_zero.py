"""Stage 05 against a real stage-04 run (torchrun + DeepSpeed ZeRO-2 on 2 CPU processes,
the session's ``zero2_run`` of tests/fixtures_runs.py, shared with test_training_run.py):
the ZeRO states listed with their world size, consolidated by DeepSpeed's zero_to_fp32
to exactly the exported weights, the whole stage on the run's folders, and a missing
rank's optimizer states reported (and that checkpoint never consolidated)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from hyport_lib.weights import stage
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.params import Params
from hyport_lib.weights.zero import ADAPTER_FILE, _compare, consolidate, list_zero, zero_findings


@pytest.fixture(scope="module")
def trained(zero2_run):
    """The session's real ZeRO-2 run (read only: a test that changes files copies them)."""
    result = zero2_run
    assert result.final_dir and result.last_checkpoint, (result.reason, result.log_tail)
    return result


def _tag(trained) -> str:
    """DeepSpeed's folder in the last checkpoint: ``global_step<the checkpoint's step>``."""
    return f"global_step{Path(trained.last_checkpoint).name.rpartition('-')[2]}"


@pytest.mark.slow
def test_zero_states_are_listed_with_their_world_size(trained):
    listing, found = list_zero(trained.last_checkpoint)
    assert found == []
    assert listing.tag == _tag(trained) and listing.zero_stage == 2
    assert listing.world_size == listing.dp_world_size == trained.plan.world_size == 2
    # stage 04's marker as a real run writes it: the world size and the ranks this folder holds
    assert (listing.marker_world_size, listing.storage, listing.marker_ranks, listing.ranks) == (2, "shared", [0, 1], [0, 1])
    optim = [f for f in listing.files if f.kind == "optim_states"]
    assert [f.rank for f in optim] == [0, 1]
    assert all(f.file == f"bf16_zero_pp_rank_{f.rank}_mp_rank_00_optim_states.pt" for f in optim)
    assert listing.parameters == inspect_checkpoint(trained.final_dir).parameters


@pytest.mark.slow
def test_zero_to_fp32_consolidates_to_the_exported_weights(trained, tmp_path):
    ck, final = trained.last_checkpoint, trained.final_dir
    result = consolidate(ck, [("checkpoint", ck), ("weights", final)], log_dir=tmp_path)
    assert result.status == "ok", (result.reason, result.log_tail)
    tensors = len(inspect_checkpoint(final).tensors)
    assert result.zero_tensors == tensors
    assert any("world_size: 2" in line for line in result.deepspeed_says)
    for target in result.targets:
        assert target["compared"] == target["matching"] == tensors, target["role"]
        assert target["max_abs_cast"] == 0.0 and target["max_abs_fp32"] > 0  # bf16 rounding only
        assert not target["only_in_zero"] and not target["only_in_file"]
    assert zero_findings(result) == []


@pytest.mark.slow
def test_the_stage_on_a_training_run(trained, tmp_path):
    """As notebook 05 runs after 04: everything on, every proof passes."""
    from hyport_lib.results import load_record, record

    params = Params(weights_path=trained.final_dir, base_path=trained.plan.model_path,
                    checkpoint_path=trained.last_checkpoint)  # the notebook's defaults: every check on
    r = stage.run(dataclasses.replace(stage.plan(params), log_dir=tmp_path))
    record(stage, r, directory=tmp_path)
    assert not [f for f in r.findings if f.severity != "info"], [f.message for f in r.findings]
    assert r.reload.load_ok and r.parity.identical
    base = r.comparison("base")
    assert base.changed > 0  # training changed the weights
    assert r.comparison("checkpoint").count("same") == len(r.inspection.tensors) == r.tensor_count
    recorded = load_record(tmp_path / "05_weights.json", stage.RESULT)
    assert recorded.verdict == "PASS" and recorded.provenance.device == "cpu"
    assert recorded.data.reload.load_ok and recorded.data.tensor_count == r.tensor_count
    assert recorded.headline["LOAD_OK"] is True
    assert recorded.headline["tensors changed vs base"] == f"{base.changed}/{base.compared}"


@pytest.mark.slow
def test_a_missing_rank_is_reported(trained, tmp_path):
    ck = tmp_path / Path(trained.last_checkpoint).name
    shutil.copytree(trained.last_checkpoint, ck)
    (ck / _tag(trained) / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    params = Params(weights_path=trained.final_dir, checkpoint_path=str(ck), full_scan=False, reload=False,
                    logits_parity=False)
    result = stage.run(dataclasses.replace(stage.plan(params), log_dir=tmp_path))
    classes = {f.cls: f for f in result.findings}
    assert "zero_incomplete" in classes and "zero_failed" not in classes  # never handed to zero_to_fp32
    assert "missing [1]" in classes["zero_incomplete"].message
    assert classes["zero_incomplete"].message.endswith("; not consolidated: only a complete checkpoint is")
    assert result.zero_compare is None and stage.summarize(result).verdict == "FAIL"


def test_zero_states_compare_with_a_lora_adapter_file(tmp_path):
    """DeepSpeed names LoRA weights with the adapter name, PEFT's file without it."""
    a = torch.randn(4, 8)
    b = torch.randn(8, 4)
    path = tmp_path / ADAPTER_FILE
    save_file({"m.q_proj.lora_A.weight": a.to(torch.bfloat16), "m.q_proj.lora_B.weight": b.to(torch.bfloat16)},
              str(path))
    state = {"m.q_proj.lora_A.default.weight": a, "m.q_proj.lora_B.default.weight": b + 1}
    target = _compare("adapter", str(path), state, False)
    assert (target["compared"], target["matching"], target["differing_keys"]) == (2, 1, ["m.q_proj.lora_B.weight"])
    assert target["max_abs_cast"] == pytest.approx(1.0, abs=0.02) and not target["only_in_zero"]
