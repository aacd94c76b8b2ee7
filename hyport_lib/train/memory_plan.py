"""Stage 04's memory plan (docs/memory.md): what one rank of this run holds on its card and
on its host, from the checkpoint's headers and the run's settings, judged before the
dataset is read or anything loads. A run that would not fit is refused in one line with
the figures and the nearest plan that fits, naming the parameter to change.
"""

from __future__ import annotations

from hyport_lib.memory.fit import Capacity, Fit, require_fit
from hyport_lib.memory.model import DTYPE_NAMES, Workload
from hyport_lib.memory.shape import ModelShape
from hyport_lib.params import AUTO_ATTENTION
from hyport_lib.train.params import Params
from hyport_lib.utils.values import as_int

def expects_eager(params: Params) -> bool:
    """The attention before it is chosen (its proof runs on the dataset's rows): eager for
    an unpacked run on ``auto`` or ``eager``; packing runs hyport's. A swap that fails its
    proof falls back to eager, and the plan is judged again (:func:`judge_memory`)."""
    return not params.packing and params.attn_implementation in (AUTO_ATTENTION, "eager")


def training_workload(params: Params, kind: str, precision: str, deepspeed_json: dict, nproc: int, *,
                      eager: bool) -> Workload:
    """The ZeRO stage and offload as the run's DeepSpeed JSON says them (a user's own file
    included); the rest from the parameters."""
    zero = deepspeed_json.get("zero_optimization") or {}
    stage = as_int("zero_optimization.stage", zero.get("stage", 0)) if isinstance(zero, dict) else 0
    return Workload(
        "training", kind, DTYPE_NAMES[precision], world_size=nproc * params.nnodes, ranks_per_host=nproc,
        finetuning=params.finetuning_type, zero_stage=stage,
        offload_optimizer=_offloaded(zero, "offload_optimizer"), offload_params=_offloaded(zero, "offload_param"),
        lora_rank=params.lora_rank, lora_targets=tuple(params.lora_targets), sequence=params.max_seq_len,
        micro_batch=params.per_device_train_batch_size, gradient_checkpointing=params.gradient_checkpointing,
        eager_attention=eager)


def _offloaded(zero: dict, key: str) -> bool:
    # "nvme" takes the states off the card too; the host figure then counts them (conservative)
    section = zero.get(key) if isinstance(zero, dict) else None
    return isinstance(section, dict) and section.get("device") in ("cpu", "nvme")


def judge_memory(params: Params, kind: str, shape: ModelShape, precision: str, deepspeed_json: dict, nproc: int,
                 room: Capacity, *, eager: bool) -> Fit:
    """The fit of this run in ``room`` (its cards and this host, read once a plan: asking
    npu-smi takes seconds); :class:`DoesNotFit` (a ValueError) when a known capacity is exceeded."""
    workload = training_workload(params, kind, precision, deepspeed_json, nproc, eager=eager)
    return require_fit(shape, workload, room)

