"""The run's DeepSpeed JSON: a bundled ``parameters/deepspeed/zero<N>.json`` (README there) or
the user's file, with what depends on the host and the parameters filled in; and the precision,
which DeepSpeed and the Trainer must agree on.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import hyport_lib
from hyport_lib.backend import PrecisionChoice
from hyport_lib.train.params import Params
from hyport_lib.utils.values import as_int


def bundled_config_path(zero_stage: int) -> Path:
    return Path(hyport_lib.__file__).resolve().parents[1] / "parameters" / "deepspeed" / \
        f"zero{int(zero_stage)}.json"


def resolve_precision(precision: str, backend) -> PrecisionChoice:
    """The run's precision and why: ``auto`` is the backend's choice (bf16 where the device
    computes it natively, fp32 elsewhere); bf16 stays available where it is only emulated."""
    if precision == "fp16" and backend.kind == "cpu":
        raise ValueError("precision='fp16': DeepSpeed has no fp16 on the CPU ('Type fp16 is not "
                         "supported on your device'); use bf16 or fp32 there")
    if precision == "bf16" and not backend.supports_bf16():
        raise ValueError(f"precision='bf16': the {backend.kind} backend here has no bf16; "
                         "use precision='fp32' or 'fp16'")
    return backend.choose_precision(precision)


def load_json(path: os.PathLike, what: str) -> dict:
    path = Path(path).expanduser()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{what}={str(path)!r}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}={str(path)!r}: not a readable JSON file ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{what}={str(path)!r}: expected a JSON object")
    return data


def build_deepspeed_config(params: Params, backend, precision: str) -> dict:
    if params.deepspeed_config:
        data = load_json(params.deepspeed_config, "deepspeed_config")
        zero = data.get("zero_optimization") or {}
        raw = zero.get("stage", 0) if isinstance(zero, dict) else zero
        try:
            stage = as_int("zero_optimization.stage", raw)
        except ValueError:
            raise ValueError(f"deepspeed_config={params.deepspeed_config!r}: zero_optimization.stage is "
                             f"{raw!r}; hyport needs the number (0, 1, 2 or 3), the same as zero_stage, "
                             f"to check the run") from None
        if stage != params.zero_stage:
            raise ValueError(f"deepspeed_config={params.deepspeed_config!r} sets ZeRO stage "
                             f"{stage} but zero_stage={params.zero_stage}; make them agree")
    else:
        data = load_json(bundled_config_path(params.zero_stage), "deepspeed_config")
    data = copy.deepcopy(data)
    data["bf16"] = {**(data.get("bf16") or {}), "enabled": precision == "bf16"}
    fp16 = {**(data.get("fp16") or {}), "enabled": precision == "fp16"}
    if precision == "fp16":
        fp16["loss_scale"] = float(params.loss_scale)
    data["fp16"] = fp16
    optimizer = data.setdefault("optimizer", {"type": "AdamW", "params": {}})
    if backend.kind == "cpu" and not params.offload_optimizer:
        # Without it DeepSpeed builds its C++ CPU Adam at first use (a compiler, ~1 min).
        optimizer.setdefault("params", {})["torch_adam"] = True
    zero = data.setdefault("zero_optimization", {"stage": params.zero_stage})
    if params.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": backend.is_accelerator}
    if params.storage == "node_local" and params.nnodes > 1:
        # each node saves and reads its own ranks' states in its own output_dir
        data["checkpoint"] = {**(data.get("checkpoint") or {}), "use_node_local_storage": True}
    return data


@dataclass
class DeepSpeedSettings:
    """The few settings of a DeepSpeed config a reader wants to see in the report."""

    zero_stage: Optional[int] = None
    bf16: bool = False
    fp16: bool = False
    loss_scale: Optional[float] = None  # fp16 only; None: dynamic
    offload_optimizer: Optional[str] = None  # where to: cpu, nvme
    optimizer: Optional[str] = None
    torch_adam: bool = False


def describe(data: dict) -> DeepSpeedSettings:
    zero = data.get("zero_optimization") or {}
    optimizer = data.get("optimizer") or {}
    fp16 = data.get("fp16") or {}
    return DeepSpeedSettings(zero.get("stage"), bool((data.get("bf16") or {}).get("enabled")),
                             bool(fp16.get("enabled")), fp16.get("loss_scale") if fp16.get("enabled") else None,
                             (zero.get("offload_optimizer") or {}).get("device"), optimizer.get("type"),
                             bool((optimizer.get("params") or {}).get("torch_adam")))

