"""DeepSpeed's fp32 master weights against the exported safetensors.

:func:`consolidate` runs DeepSpeed's ``get_fp32_state_dict_from_zero_checkpoint`` (ZeRO-2
and 3, on the CPU) in a fresh child (:mod:`.runner`) and compares each consolidated tensor
with the saved one, by the model's names (:mod:`.names`): ``max |fp32 cast to the saved
dtype − saved|`` must be 0 (it is for the Trainer's checkpoints); ``max |fp32 − saved|``
shows the rounding.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.runner import ChildRun, run_task
from hyport_lib.weights.zero import find_tag

#: PEFT's file of a LoRA checkpoint; its keys lack the adapter name DeepSpeed's carry
#: (``lora_A.weight`` on disk, ``lora_A.default.weight`` in the model).
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_NAME = "default"


@dataclass
class ZeroComparison(ChildRun):
    """The consolidation and its comparison with each exported folder (``targets``: its
    ``folder``, ``role`` (``checkpoint``, ``adapter``: its LoRA file, or ``weights``: the
    folder verified), counts, worst differences and one row per tensor)."""

    checkpoint: str
    status: str  # ok | failed | timeout
    tag: Optional[str] = None
    zero_tensors: Optional[int] = None
    zero_parameters: Optional[int] = None
    consolidate_s: Optional[float] = None
    deepspeed_says: list[str] = field(default_factory=list)
    targets: list[dict] = field(default_factory=list)
    peak_rss_bytes: Optional[int] = None


def consolidate(checkpoint: os.PathLike, targets: list[tuple[str, os.PathLike]], *,
                tag: Optional[str] = None, trust_remote_code: bool = False,
                timeout_s: float = 600.0, log_dir: Optional[os.PathLike] = None) -> ZeroComparison:
    """Consolidate ``checkpoint`` and compare with each ``(role, folder)`` of ``targets``."""
    folder = Path(checkpoint).expanduser().resolve()
    spec = {"checkpoint": str(folder), "tag": tag, "trust_remote_code": bool(trust_remote_code),
            "targets": [[role, str(Path(t).expanduser().resolve())] for role, t in targets]}
    out = run_task("zero", spec, timeout_s=timeout_s, log_dir=log_dir, name="zero_to_fp32")
    return ZeroComparison.from_outcome(
        out, str(folder), out.status, tag=tag, peak_rss_bytes=out.result.get("peak_rss_bytes"),
        taken=("tag", "zero_tensors", "zero_parameters", "consolidate_s", "deepspeed_says", "targets"))


def zero_findings(result: ZeroComparison) -> list[Finding]:
    here = Path(result.checkpoint).name
    if result.status != "ok":
        return [Finding("zero_failed", here, f"zero_to_fp32 in a fresh process: {result.reason}")]
    out = []
    for target in result.targets:
        own = target["role"] in ("checkpoint", "adapter")
        where = Path(target["folder"]).name
        if target["differing"]:
            note = "" if own else (" (expected only when training went on after this checkpoint)")
            out.append(Finding(
                "zero_mismatch", where,
                f"{target['differing']} of {target['compared']} tensor(s) of {where} differ from "
                f"{here}'s consolidated fp32 weights cast to their dtype (worst {target['max_abs_cast']:.3g}): "
                f"{name_some(target['differing_keys'])}{note}",
                tensors=target["differing_keys"], severity="" if own else "warning"))
        lonely = target["only_in_zero"] + target["only_in_file"]
        if lonely:
            out.append(Finding(
                "zero_keys_differ", where,
                f"{len(target['only_in_zero'])} tensor(s) only in the ZeRO states, "
                f"{len(target['only_in_file'])} only in the files: {name_some(lonely)}",
                tensors=lonely, severity="" if own else "warning"))
    return out


# --------------------------------------------------------------------------- child side
def consolidate_in_child(spec: dict) -> dict:
    """In the worker: DeepSpeed's consolidation, then every saved tensor against it."""
    import contextlib
    import io
    import time

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    started = time.perf_counter()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # it prints its progress to stdout
        state = get_fp32_state_dict_from_zero_checkpoint(spec["checkpoint"], tag=spec.get("tag"),
                                                         lazy_mode=True)
    seconds = time.perf_counter() - started
    print(said.getvalue(), flush=True)
    targets = [_compare(role, folder, state, bool(spec.get("trust_remote_code")))
               for role, folder in spec["targets"]]
    return {"tag": spec.get("tag") or find_tag(Path(spec["checkpoint"])), "zero_tensors": len(state),
            "zero_parameters": int(sum(math.prod(t.shape) for t in state.values())),
            "consolidate_s": round(seconds, 3),
            "deepspeed_says": [s.strip() for s in said.getvalue().splitlines() if s.strip()][:6],
            "targets": targets}


def _compare(role: str, folder: str, state: dict, trust_remote_code: bool) -> dict:
    import torch

    insp = inspect_checkpoint(folder, trust_remote_code=trust_remote_code, validate=False)
    if role == "adapter":
        marker = f".{ADAPTER_NAME}."
        state = {k.replace(marker, "."): v for k, v in state.items()}
    with torch.no_grad():  # DeepSpeed's tensors may require grad
        rows = _rows(insp, state)
    seen = {r["model name"] for r in rows if r["status"] != "only in file"}
    # zero_to_fp32 lists a tied weight under both names; the files hold it once (as
    # save_pretrained writes a tied model): its target is no tensor missing from them.
    seen |= {target for target, source in insp.names.tied.items() if source in seen and target in state}
    differing = [r["tensor"] for r in rows if r["status"] not in ("match", "only in file")]
    compared = [r for r in rows if r["max |cast − saved|"] is not None]
    return {"role": role, "folder": folder, "compared": len(compared),
            "matching": sum(1 for r in rows if r["status"] == "match"),
            "differing": len(differing), "differing_keys": differing,
            "max_abs_cast": max((r["max |cast − saved|"] for r in compared), default=0.0),
            "max_abs_fp32": max((r["max |fp32 − saved|"] for r in compared), default=0.0),
            "only_in_zero": sorted(set(state) - seen),
            "only_in_file": [r["tensor"] for r in rows if r["status"] == "only in file"],
            "rows": rows}


def _rows(insp, state: dict) -> list[dict]:
    """One row per saved tensor: its difference from the consolidated one."""
    from safetensors import safe_open

    rows = []
    for shard in insp.shards:
        if not shard.ok:
            continue
        with safe_open(str(shard.path), framework="pt") as fh:
            for key in fh.keys():
                entry = shard.tensors[key]
                name = insp.names.to_model(key)
                row = {"tensor": key, "model name": name, "saved dtype": entry.dtype,
                       "shape": list(entry.shape), "max |cast − saved|": None,
                       "max |fp32 − saved|": None, "status": "only in file"}
                rows.append(row)
                if name not in state:
                    continue
                zero = state[name]
                zero = zero.contiguous() if hasattr(zero, "contiguous") else zero  # lazy_mode
                saved = fh.get_tensor(key)
                if tuple(zero.shape) != tuple(saved.shape):
                    row["status"] = f"shape {list(zero.shape)} in ZeRO"
                    continue
                cast = float((zero.to(saved.dtype).float() - saved.float()).abs().max()) if saved.numel() else 0.0
                full = float((zero.float() - saved.float()).abs().max()) if saved.numel() else 0.0
                row.update({"max |cast − saved|": cast, "max |fp32 − saved|": full,
                            "status": "match" if cast == 0.0 else "differs"})
    return rows
