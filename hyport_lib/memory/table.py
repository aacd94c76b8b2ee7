"""``hyport plan``'s table: each ZeRO stage that stage 04 runs x full / LoRA fine-tune of one
model, and its inference, against one capacity, computed from headers only."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from hyport_lib.memory.fit import Capacity, fit
from hyport_lib.memory.model import Workload
from hyport_lib.memory.shape import ModelShape

if TYPE_CHECKING:
    import pandas as pd


def plan_table(shape: ModelShape, training: Workload, capacity: Capacity, *, new_tokens: int = 256) -> "pd.DataFrame":
    """One row per plan stage 04 can run: ZeRO 0, 2 and 3 x full / LoRA (with and without an
    offloaded optimizer where ZeRO allows it) at ``training``'s other settings, then inference.
    (ZeRO-1, which stage 04 does not take, is in the memory model and its bench.)"""
    import pandas as pd

    rows = []
    for finetuning in ("full", "lora"):
        for zero in (0, 2, 3):
            for offload in ((False, True) if zero >= 1 else (False,)):
                workload = replace(training, stage="training", finetuning=finetuning, zero_stage=zero,
                                   offload_optimizer=offload)
                rows.append(_row(fit(shape, workload, capacity, search=False), workload))
    inference = replace(training, stage="inference", new_tokens=new_tokens, gradient_checkpointing=False)
    rows.append(_row(fit(shape, inference, capacity, search=False), inference))
    return pd.DataFrame(rows)


def _row(found, workload: Workload) -> dict:
    est = found.estimate
    verdict = {True: "fits", False: "does not fit", None: "unknown"}
    if workload.stage == "training":
        offload = "optimizer" if workload.offload_optimizer else "-"
        plan = {"stage": "training", "ZeRO": workload.zero_stage,
                "fine-tune": "LoRA" if workload.finetuning == "lora" else "full", "offload": offload}
    else:
        plan = {"stage": f"inference ({workload.new_tokens} new tokens)", "ZeRO": "-", "fine-tune": "-",
                "offload": "-"}
    return {**plan,
            "card GiB": None if workload.kind == "cpu" else round(est.card_bytes / 2 ** 30, 1),
            "host GiB": round(est.host_bytes / 2 ** 30, 1),
            "card": "-" if workload.kind == "cpu" else verdict[found.card_fits],
            "host": verdict[found.host_fits]}


def common_settings(workload: Workload) -> str:
    """What every row shares: ``bf16, seq 2048, micro-batch 1, gradient checkpointing``."""
    parts = workload.describe().split(", ")
    return ", ".join(p for p in parts if not p.startswith(("ZeRO-", "full", "LoRA", "offload")))
