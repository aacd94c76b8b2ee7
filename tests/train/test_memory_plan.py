"""Stage 04's memory plan (hyport_lib/train/memory_plan.py) on a 7 B-shaped checkpoint whose
data are holes: plans only, nothing loads it. On eight 910B3s (the torch_npu double: 64 GiB
a card) ZeRO-2 fits and the plan, the record, the card and the draft carry the line; ZeRO-0
is refused naming zero_stage and the nearest plan; on a 23.5 GiB CPU host the run is
refused for host RAM, before a bad dataset is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.memory.fit import DoesNotFit
from hyport_lib.memory.record import MemoryPlan, MemoryRow
from hyport_lib.stages import read_stage_record
from hyport_lib.train import deepspeed_config as ds
from hyport_lib.train.memory_plan import training_workload
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import prepare
from hyport_lib.train.show import glance, memory_frame, plan_frame
from hyport_lib.utils.typed_records import to_mapping
from blog_drafts import stage_draft, train_data
from tests.real_size import write_sparse_checkpoint

GIB = 2 ** 30


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory) -> Path:
    """Qwen2.5-7B's headers and config, with the tiny model's tokenizer for the dataset check."""
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B", tokenizer=True)


def _host(monkeypatch, gib: float) -> None:
    """The host's RAM as the memory model reads it (this machine's would decide otherwise)."""
    monkeypatch.setattr("hyport_lib.memory.capacity.host_ram", lambda: (int(gib * GIB), "test host"))


def _eight_910b3(seven_b: Path, tmp_path: Path, **overrides) -> Params:
    return Params(model_path=str(seven_b), num_cards=8, zero_stage=overrides.pop("zero_stage", 2), precision="bf16",
                  max_seq_len=2048, packing=False, attn_implementation="eager", output_dir=str(tmp_path / "out"),
                  **overrides)


def test_a_7b_zero2_plan_on_eight_910b3_fits_and_every_view_carries_the_line(seven_b, fake_npu, npu_smi_cards,
                                                                              monkeypatch, tmp_path):
    # The busy-card check asks npu-smi, a process the fast tier does not start (its own test:
    # test_preflight's NPU branch); the memory plan is judged before it.
    monkeypatch.setattr("hyport_lib.train.preflight._check_cards", lambda backend, nproc: None)
    _host(monkeypatch, 1024)
    plan = prepare(_eight_910b3(seven_b, tmp_path), get_backend("npu"))
    memory = plan.memory
    assert memory.fits and memory.parameters == 7_615_616_512
    assert memory.card_line.startswith("fits: ") and " of 64.0 GiB per card (ZeRO-2, bf16, full, seq 2048, " \
           "micro-batch 1, gradient checkpointing)" in memory.card_line
    assert 20 < memory.card_gib < 64 and memory.card_capacity_gib == 64.0
    assert memory.host_line.startswith("fits: ") and "(8 ranks x " in memory.host_line
    card = [row for row in memory.rows if row.where == "card"]
    assert card and sum(row.gib for row in card) == pytest.approx(memory.card_gib, abs=0.01)
    assert "/ 8 ranks (ZeRO-2)" in next(row.how for row in card if row.what == "optimizer states")
    # the notebook's views: the plan table and the items, card first
    shown = dict(plan_frame(plan).values.tolist())
    assert shown["memory per card"] == memory.card_line and shown["host memory"] == memory.host_line
    items = memory_frame(memory)
    assert list(items.columns) == ["where", "what", "GiB", "how"] and items["where"].iloc[0] == "card"
    # the record, read back typed; the index card and the drafts in both languages
    data = {**train_data(), "plan": {**train_data()["plan"], "memory": to_mapping(memory)}}
    record = read_stage_record("04_train", {"stage": "04_train", "data": data})
    read = record.data.plan.memory
    assert isinstance(read, MemoryPlan) and read == memory and isinstance(read.rows[0], MemoryRow)
    assert ("memory", memory.card_line) in glance(record)
    en = stage_draft(tmp_path, "04_train", data)
    assert f"| Memory per card (estimated before loading) | `{memory.card_line}` |" in en
    assert f"| 每张卡的显存（加载前估算） | `{memory.card_line}` |" in stage_draft(tmp_path, "04_train", data, "zh")


def test_zero0_is_refused_naming_zero_stage_and_the_nearest_plan(seven_b, fake_npu, npu_smi_cards, monkeypatch,
                                                                 tmp_path):
    _host(monkeypatch, 1024)
    with pytest.raises(DoesNotFit) as refused:
        prepare(_eight_910b3(seven_b, tmp_path, zero_stage=0), get_backend("npu"))
    said = str(refused.value)
    assert "\n" not in said and said.startswith("zero_stage: Qwen2.5-7B (7.62 B parameters) does not fit for ZeRO-0")
    assert "GiB per card > the card's 64.0 GiB (910B3, 65,536 MB as npu-smi reports it)" in said
    assert "; nearest plan that fits: zero_stage=3 (" in said
    assert not (tmp_path / "out").exists()


def test_on_a_cpu_host_a_7b_run_is_refused_for_host_ram_before_its_bad_dataset(seven_b, monkeypatch, tmp_path):
    """The issue's finding 5: with a dataset whose records are all bad, memory is judged first
    (the dataset is not even read), and the refusal gives the host's figures."""
    _host(monkeypatch, 23.5)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": f"r{i}", "conversations": []} for i in range(3)]))
    with pytest.raises(DoesNotFit) as refused:
        prepare(Params(model_path=str(seven_b), dataset_path=str(bad), max_seq_len=32,
                       output_dir=str(tmp_path / "out")), get_backend("cpu"))
    said = str(refused.value)
    assert "\n" not in said and "per card" not in said
    assert "GiB of host RAM for 2 processes > the host's 23.5 GiB (test host)" in said
    parameter = said.split(":", 1)[0]
    assert parameter in {"num_cards", "zero_stage", "finetuning_type", "offload_optimizer", "precision"}
    assert "nearest plan that fits: " in said or "no plan hyport knows fits" in said


def test_a_users_deepspeed_json_sets_the_zero_stage_and_offload_that_are_counted(tmp_path):
    own = tmp_path / "mine.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                     "offload_param": {"device": "cpu"}}}))
    params = Params(zero_stage=3, deepspeed_config=str(own))  # offload_optimizer=False: the JSON decides
    config = ds.build_deepspeed_config(params, get_backend("cpu"), "bf16")
    workload = training_workload(params, "npu", "bf16", config, 8, eager=False)
    assert (workload.zero_stage, workload.offload_optimizer, workload.offload_params) == (3, True, True)
    assert (workload.world_size, workload.ranks_per_host, workload.dtype) == (8, 8, "bfloat16")
    plain = training_workload(Params(), "npu", "fp32", ds.build_deepspeed_config(Params(), get_backend("cpu"), "fp32"),
                              2, eager=True)
    assert (plain.zero_stage, plain.offload_optimizer, plain.dtype, plain.eager_attention) == (2, False, "float32", True)


def test_a_swap_that_falls_back_to_eager_is_judged_again_with_its_scores(monkeypatch, tmp_path):
    """Before the data, an unpacked sdpa run is judged without eager's score matrices; the
    attention chosen after its proof is eager here, so the plan counts them."""
    from hyport_lib.proof.choice import AttentionChoice
    from hyport_lib.train.memory_plan import expects_eager

    params = Params(packing=False, attn_implementation="sdpa", output_dir=str(tmp_path / "out"))
    assert not expects_eager(params) and expects_eager(Params(packing=False))
    monkeypatch.setattr("hyport_lib.train.preflight.choose_attention",
                        lambda asked, *args, **kwargs: AttentionChoice(asked, "eager", "sdpa"))
    plan = prepare(params, get_backend("cpu"))
    activations = [row for row in plan.memory.rows if row.what == "activations"]
    assert plan.attn_implementation == "eager" and len(activations) == 1
    assert "(eager attention's scores included)" in activations[0].how
