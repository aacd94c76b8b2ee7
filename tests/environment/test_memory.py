"""Stage 01's memory facts: each card's memory from the device tool's listing (npu-smi's
65,536 MB), else ``card_memory_gib``; the host's RAM; and, for a
checkpoint folder (a sparse 7 B, never loaded), the memory model's host need per rank in the
host_ram check instead of the backend's default."""

from __future__ import annotations

from pathlib import Path

import pytest
from blog_drafts import stage_draft

from hyport_lib.backend import get_backend
from hyport_lib.devices.probe import DeviceInfo, DeviceListing
from hyport_lib.environment import stage
from hyport_lib.environment.memory import check_card_memory, listed_memory, memory_facts
from hyport_lib.environment.params import Params
from hyport_lib.environment.show import glance
from hyport_lib.results import StageRecord
from hyport_lib.utils.typed_records import from_mapping, to_mapping
from tests.real_size import write_sparse_checkpoint


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory) -> Path:
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B")


def _npu_listing(*totals_mb: int) -> DeviceListing:
    return DeviceListing([DeviceInfo(index=i, npu_id=i, chip_id=0, name="910B3", health="OK", hbm_used_mb=0,
                                     hbm_total_mb=mb) for i, mb in enumerate(totals_mb)], source="npu-smi")


def test_npu_smis_cards_show_64_gib(fake_npu, seven_b):
    backend = get_backend("npu", 8)
    listing = _npu_listing(*[65536] * 8)
    facts = memory_facts(backend, listing, "tiny", 8, None)
    assert (facts.card_gib, facts.card_source) == (64.0, "910B3, 65,536 MB as npu-smi reports it")
    check = check_card_memory("npu", facts)
    assert check.verdict == "PASS" and check.reason.startswith(
        "64.0 GiB per card (910B3, 65,536 MB as npu-smi reports it); host RAM ")
    assert facts.model is None and "no folder" in facts.model_note  # tiny: the default per-card figure
    with_model = check_card_memory("npu", memory_facts(backend, listing, str(seven_b), 8, None))
    assert with_model.verdict == "PASS" and "; Qwen2.5-7B: fits: " in with_model.reason
    assert with_model.reason.endswith("of 64.0 GiB per card (inference, bf16, seq 2048, batch 1)")


def test_the_smallest_listed_card_then_the_parameter(fake_npu):
    npu = get_backend("npu", 3)
    found = memory_facts(npu, _npu_listing(65536, 65536, 32768), "tiny", 3, 64)
    # the smallest card; the parameter, which disagrees, is set aside and said so
    assert found.card_gib == 32.0
    assert found.card_source == "910B3, 32,768 MB as npu-smi reports it; card_memory_gib=64 set aside"
    assert listed_memory(_npu_listing(65536, 65536, 32768)) == ["cards 0-1: 64.0 GiB HBM", "card 2: 32.0 GiB HBM"]
    # a listing from torch (npu-smi missing) has no totals: the parameter
    given = memory_facts(npu, DeviceListing(source="torch"), "tiny", 3, 64)
    assert (given.card_gib, given.card_source) == (64.0, "card_memory_gib=64")
    cpu = get_backend("cpu", 2)
    unknown = memory_facts(cpu, DeviceListing(source="cpu"), "tiny", 2, None)
    assert unknown.card_gib is None and check_card_memory("npu", unknown).verdict == "SKIP"
    assert check_card_memory("npu", unknown).reason.endswith(
        ": set card_memory_gib (910B3: 64) for the memory plans of stages 02-04")
    assert check_card_memory("cpu", unknown).reason.startswith("no cards on cpu")


def test_a_checkpoint_folder_sets_the_host_ram_per_rank_and_the_index_card_says_it(seven_b, tmp_path):
    report = stage.run(stage.plan(Params(device="cpu", num_cards=2, check_ports=False, model_path=str(seven_b),
                                         card_memory_gib=64)))
    memory = report.memory
    assert memory.model is not None and memory.model.model == "Qwen2.5-7B"
    assert memory.model.setting.startswith("inference, bf16, seq 2048")  # the stored dtype
    assert memory.host_per_rank_gib > 14  # 7.6 B bf16 weights on each CPU worker
    ram = report.check("host_ram")
    assert f"({memory.host_per_rank_gib:g} GiB each)" in ram.reason.replace(" GB each", " GiB each")
    assert "(per rank: the memory model's inference, bf16" in ram.reason and "of Qwen2.5-7B" in ram.reason
    card = report.check("card_memory")
    assert card.verdict == "SKIP" and card.reason.startswith("no cards on cpu")  # on CPU nothing is judged

    read = from_mapping(stage.EnvironmentReport, to_mapping(report))
    assert read.memory == memory
    rows = dict(glance(StageRecord(stage=stage.STAGE, verdict="PASS", data=read)))
    assert rows["memory"] == memory.line and rows["Qwen2.5-7B"] == memory.model.host_line
    assert f"- memory: {memory.line}" in stage.report_text(report)
    # the blog draft carries them too (issue 41), the recorded lines marked in the Chinese one
    for lang, capacity_row, model_row in (
            ("en", f"| Memory the stages plan with | {memory.line} |",
             f"| Memory estimate of `Qwen2.5-7B` | {memory.model.host_line} |"),
            ("zh", f"| 各阶段规划所依据的内存 | `{memory.line}` |", f"| `Qwen2.5-7B` 的内存估算 | `{memory.model.host_line}` |")):
        draft = stage_draft(tmp_path / lang, stage.STAGE, to_mapping(read), lang).splitlines()
        assert capacity_row in draft and model_row in draft, lang
    given = stage.run(stage.plan(Params(device="cpu", num_cards=2, check_ports=False, model_path=str(seven_b),
                                        ram_gb_per_card=3)))
    assert "per rank: the memory model" not in given.check("host_ram").reason  # the parameter wins
