"""Stage 03's memory plan on a real-size (sparse, never loaded) 7 B checkpoint: the cards and
the host judged before any worker starts, the fit carried by the plan, the record, the index
card and the draft; a grid that does not fit refused in one line with the figures."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from blog_drafts import stage_draft
from hyport_lib.backend import get_backend
from hyport_lib.commands import main
from hyport_lib.inference import stage
from hyport_lib.inference.grid import GridResult
from hyport_lib.inference.memory_plan import plan_memory
from hyport_lib.inference.params import Params
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.inference.show import glance
from hyport_lib.memory import capacity as memory_capacity
from hyport_lib.memory.fit import DoesNotFit
from hyport_lib.memory.shape import model_shape, read_model_shape
from hyport_lib.results import StageRecord
from hyport_lib.utils.typed_records import from_mapping, to_mapping
from tests.real_size import write_sparse_checkpoint

GIB = 2 ** 30
#: What a 910B server's host offers (this VM's 23 GiB cannot hold 8 ranks' runtimes).
SERVER_RAM = (1536 * GIB, "a 910B server's RAM, as this test sets it")
TEXT_ONLY = dict(attn_implementation="eager", skip_not_applicable=True,
                 batch_prompts=[["How do I open a fridge?", False], ["Name three colours.", False]])


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory) -> Path:
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B", tokenizer=True)


def _plan(folder: Path, tmp_path: Path, **kw):
    return stage.plan(Params(**{**TEXT_ONLY, "model_path": str(folder), "log_dir": str(tmp_path / "logs"), **kw}))


def _memory(folder: Path, dtype: str, cards: int = 8):
    """The plan's memory step alone on the NPU double (the whole plan asks npu-smi: a process)."""
    config = InferenceConfig(model_path=str(folder), dtype=dtype, batch_prompts=(("How do I open a fridge?", False),))
    return plan_memory(get_backend("npu", cards), model_shape(str(folder), trust_remote_code=False), str(folder),
                       config, cards, card_memory_gib=None)


@pytest.mark.slow  # the plan asks the npu-smi double which cards are busy
def test_a_7b_grid_fits_8_cards_of_64_gib_in_bf16_and_every_view_says_so(fake_npu, npu_smi_cards, seven_b,
                                                                         tmp_path, monkeypatch):
    monkeypatch.setattr(memory_capacity, "host_ram", lambda: SERVER_RAM)
    plan = _plan(seven_b, tmp_path, device="npu", dtype="bfloat16")
    memory = plan.memory
    assert memory is not None and memory.fits and memory.parameters == 7_615_616_512
    assert memory.card_capacity_gib == 64.0 and 14.2 < memory.card_gib < 20  # 7.6 B x 2 B and the margin
    assert memory.card_line.startswith(f"fits: {memory.card_gib:.1f} of 64.0 GiB per card (inference, bf16, seq ")
    assert "batch 2, 16 new tokens" in memory.card_line and "8 ranks x" in memory.host_line
    assert f"memory: {memory.card_line}" in plan.notes and f"memory: {memory.host_line}" in plan.notes
    assert any(n.startswith("memory: seq ") and "a bound on its text tokens" in n for n in plan.notes)

    # the record carries it typed, and reads back without the memory model
    grid = GridResult(rows=[], consistent=True, differing_cards=[], log_dir=tmp_path, wall_s=1.0,
                      memory=plan.memory, config=plan.config)
    read = from_mapping(GridResult, to_mapping(grid))
    assert read.memory == memory and read.memory.rows and read.memory.rows[0].what.startswith("weights")
    record = StageRecord(stage=stage.STAGE, verdict="PASS", data=read)
    assert ("memory", memory.card_line) in glance(record)
    data = to_mapping(grid)
    for lang in ("en", "zh"):
        assert memory.card_line in stage_draft(tmp_path / lang, stage.STAGE, data, lang)


def test_8_gib_cards_refuse_a_7b_grid_with_the_figures(fake_npu, npu_smi_cards, seven_b, tmp_path, monkeypatch):
    monkeypatch.setattr(memory_capacity, "host_ram", lambda: SERVER_RAM)
    npu_smi_cards(8192)
    with pytest.raises(DoesNotFit) as refused:
        _memory(seven_b, "bfloat16")
    said = str(refused.value)
    assert said.startswith("model_path: Qwen2.5-7B (7.62 B parameters) does not fit for inference, bf16")
    assert "GiB per card > the card's 8 GiB (910B3, 8,192 MB as npu-smi reports it)" in said
    assert "no plan hyport knows fits" in said and "\n" not in said
    npu_smi_cards(65536)
    assert _memory(seven_b, "bfloat16").card_line.startswith("fits: ")  # the same plan on a 910B3


def test_a_float32_grid_too_big_for_the_cards_is_told_bf16_fits(fake_npu, npu_smi_cards, seven_b, tmp_path,
                                                                monkeypatch):
    monkeypatch.setattr(memory_capacity, "host_ram", lambda: SERVER_RAM)
    npu_smi_cards(24 * 1024)
    with pytest.raises(DoesNotFit, match=r"^dtype: .* fp32, .*GiB per card > the card's 24\.0 GiB .*"
                                         r"nearest plan that fits: dtype=bfloat16 \(\d+\.\d of 24\.0 GiB"):
        _memory(seven_b, "float32")


def test_a_float32_7b_grid_is_refused_for_this_hosts_ram_in_one_line(seven_b, tmp_path, capsys):
    """This host's own RAM: as many workers as make the float32 weights (28.4 GiB each) more
    than it holds, so the refusal does not hang on the size of the machine running it."""
    host, source = memory_capacity.host_ram()
    weights = read_model_shape(seven_b).parameters * 4
    workers = math.ceil(host / weights)  # at least one; their weights alone exceed the host
    assert workers * weights > host
    args = ["infer", "--device", "cpu", "--num-cards", str(workers), "--model-path", str(seven_b),
            "--dtype", "float32", "--attn-implementation", "eager", "--skip-not-applicable",
            "--log-dir", str(tmp_path / "logs"), "--no-record"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("hyport infer: ") and "does not fit for inference, fp32" in err
    assert f"of host RAM for {workers} process" in err and f"({source})" in err
    assert "nearest plan that fits: " in err or "no plan hyport knows fits" in err
