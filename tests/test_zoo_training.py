"""Three zoo representatives through real torchrun + DeepSpeed ZeRO-2 on 2 CPU processes:
an M-RoPE VLM packed, Gemma3 with a text-only batch on one rank every step, and a
text-only MoE with LoRA. (Every family in-process: test_zoo_stages.py; the whole matrix:
bench/zoo_matrix.py.)"""

from __future__ import annotations

import pytest

from hyport_lib.train import stage
from hyport_lib.train.params import Params
from zoo import mixed_dataset

pytestmark = pytest.mark.slow


def _train(zoo, tmp_path, name, **params):
    params.setdefault("max_steps", 2)
    params.setdefault("zero_stage", 2)
    params.setdefault("num_cards", 2)
    result = stage.run(stage.plan(Params(model_path=str(zoo[name]), output_dir=str(tmp_path / name),
                                         **params)))
    assert result.status == "ok" and result.exit_code == 0, result.reason
    assert [r["step"] for r in result.metrics] == list(range(1, params["max_steps"] + 1))
    assert all(r["world_size"] == 2 for r in result.metrics)
    return result


def test_an_mrope_vlm_trains_packed(zoo, tmp_path):
    result = _train(zoo, tmp_path, "qwen2_vl", packing=True)
    assert result.plan["dataset"]["image_samples"] == 11
    from transformers import AutoModelForImageTextToText

    model, info = AutoModelForImageTextToText.from_pretrained(result.final_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_gemma3_trains_with_a_text_only_rank_every_step(zoo, tmp_path):
    data = mixed_dataset(tmp_path / "data")
    result = _train(zoo, tmp_path, "gemma3", packing=False, dataset_path=str(data))
    assert result.plan["dataset"]["samples"] == 2 and result.plan["dataset"]["image_samples"] == 1
    assert result.worker["rows"] == 2


def test_a_text_only_moe_trains_with_lora(zoo, tmp_path):
    result = _train(zoo, tmp_path, "qwen3_moe", packing=True, finetuning_type="lora")
    assert result.plan["dataset"]["model_kind"] == "text-only" and result.plan["dataset"]["samples"] == 3
    assert any("not applicable" in note for note in result.plan["notes"])
    assert 0 < result.worker["trainable_parameters"]
