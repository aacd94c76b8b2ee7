"""The run's DeepSpeed JSON (hyport_lib/train/deepspeed_config.py): precision and host fill it in,
and a file of the user's own must agree with zero_stage."""

from __future__ import annotations

import json

import pytest

from hyport_lib import backend as B
from hyport_lib.backend import get_backend
from hyport_lib.train.deepspeed_config import build_deepspeed_config, resolve_precision
from hyport_lib.train.params import Params


@pytest.mark.parametrize("flags, auto", [("avx2", "fp32"), ("avx2 avx512_bf16 amx_bf16", "bf16")])
def test_auto_precision_is_bf16_only_on_a_cpu_that_computes_it(tmp_path, monkeypatch, flags, auto):
    """The plan's precision is the backend's choice with its reason; bf16 stays available on
    a CPU that only emulates it (the NPU's dtype), and says so."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
    monkeypatch.setattr(B, "CPUINFO_PATH", str(cpuinfo))
    cpu = get_backend("cpu")
    chosen = resolve_precision("auto", cpu)
    assert chosen.precision == auto and chosen.reason.startswith("bf16 (auto)" if auto == "bf16" else "float32 (auto)")
    data = build_deepspeed_config(Params(), cpu, chosen.precision)
    assert data["bf16"]["enabled"] is (auto == "bf16") and data["fp16"]["enabled"] is False
    asked = resolve_precision("bf16", cpu)
    assert asked.precision == "bf16" and ("emulated in software" in asked.reason) is (auto == "fp32")


def test_deepspeed_config_follows_precision_and_host():
    cpu = get_backend("cpu")
    with pytest.raises(ValueError, match="no fp16 on the CPU"):
        resolve_precision("fp16", cpu)
    data = build_deepspeed_config(Params(zero_stage=3), cpu, "bf16")
    assert data["zero_optimization"]["stage"] == 3 and data["bf16"]["enabled"] is True
    assert data["fp16"]["enabled"] is False and data["optimizer"]["params"]["torch_adam"] is True
    assert data["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    fp16 = build_deepspeed_config(Params(loss_scale=4096, precision="fp16"), cpu, "fp16")
    assert fp16["fp16"] == {**fp16["fp16"], "enabled": True, "loss_scale": 4096.0}
    offload = build_deepspeed_config(Params(offload_optimizer=True), cpu, "bf16")
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "torch_adam" not in offload["optimizer"]["params"]  # offload needs DeepSpeed's CPU Adam


def test_own_deepspeed_file_must_agree_with_zero_stage(tmp_path):
    own = tmp_path / "ds.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    with pytest.raises(ValueError, match="sets ZeRO stage 3 but zero_stage=2"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")
    own.write_text("{not json")
    with pytest.raises(ValueError, match="ds.json"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")


def test_own_deepspeed_file_with_stage_auto_names_the_file_and_the_field(tmp_path):
    own = tmp_path / "ds.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": "auto"}}))
    with pytest.raises(ValueError, match="ds.json.*zero_optimization.stage is 'auto'"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")
