"""The whole verification of one checkpoint (:func:`verify`), in the notebook's order:
headers, index and config (:mod:`.layout`); the full scan (:mod:`.scan`); the reload
(:mod:`.reload`); against a base (:mod:`.compare`); against a checkpoint: its tensors,
logits (:mod:`.parity`) and DeepSpeed ZeRO states (:mod:`.zero`, :mod:`.zero_consolidate`).
A Trainer checkpoint given as the weights is its own checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.params import AUTO_ATTENTION
from hyport_lib.weights.compare import compare_weights
from hyport_lib.weights.defaults import Sources
from hyport_lib.weights.layout import Inspection, inspect_checkpoint
from hyport_lib.weights.params import Params
from hyport_lib.weights.parity import logits_parity as compare_logits, parity_findings
from hyport_lib.weights.reload import reload as reload_folder, reload_findings
from hyport_lib.weights.result import WeightsResult, inspected
from hyport_lib.weights.runner import default_log_dir
from hyport_lib.weights.scan import ScanProgress, full_scan as scan_tensors
from hyport_lib.weights.zero import find_tag, list_zero
from hyport_lib.weights.zero_consolidate import ADAPTER_FILE, consolidate, zero_findings


@dataclass
class WeightsPlan:
    """What stage 05 checks: the parameters and the folders they resolved to
    (:func:`hyport_lib.weights.stage.plan`). ``log_dir``: the child processes' logs; None:
    a fresh folder beside the results, made when the first child starts."""

    params: Params
    sources: Sources
    log_dir: Optional[Path] = None


def verify(plan: WeightsPlan, on_progress: Optional[Callable[[ScanProgress], None]] = None) -> WeightsResult:
    """Every check ``plan`` asks for (its folders must exist), each problem a finding;
    ``on_progress`` is called while the scan and the comparisons read.

    Raises:
        KeyboardInterrupt: stopped; the checks that finished are on ``exc.partial``.
    """
    started = time.perf_counter()
    p, sources = plan.params, plan.sources
    insp = inspect_checkpoint(sources.weights, trust_remote_code=p.trust_remote_code)
    # The parameters as run: the folders as resolved, not as given.
    options = {**{f.name: getattr(p, f.name) for f in fields(p) if f.name != "weights_path"},
               "base_path": sources.base, "checkpoint_path": sources.checkpoint}
    result = inspected(insp, options, sources.note)
    reload, logits_parity = p.reload, p.logits_parity
    if (reload or logits_parity) and insp.kind == "file":
        # One file has no config.json beside it that is sure to belong to it: nothing to
        # load a model from. Said as a finding, so the header checks still count.
        asked = [n for n, on in (("reload", reload), ("logits check", logits_parity and sources.checkpoint)) if on]
        if asked:
            two = len(asked) > 1
            result.findings.append(Finding(
                "reload_skipped", insp.shards[0].label if insp.shards else sources.weights,
                f"the {' and the '.join(asked)} need{'' if two else 's'} the model folder (config.json "
                f"beside the weights), not one file: skipped; give the folder to run "
                f"{'them' if two else 'it'}"))
        reload = logits_parity = False
    try:
        _checks(result, insp, plan, reload, logits_parity, on_progress)
    except KeyboardInterrupt as exc:
        # Stopped: the checks that finished are kept; the caller finds them on the exception.
        result.findings.append(Finding("verify_stopped", insp.path, "stopped by a signal before every "
                                       "check ran: the checks listed are the ones that finished"))
        result.wall_s = time.perf_counter() - started
        exc.partial = result
        raise
    result.wall_s = time.perf_counter() - started
    return result


def _checks(result: WeightsResult, insp: Inspection, plan: WeightsPlan, reload: bool,
            logits_parity: bool, on_progress) -> None:
    """The checks that read tensors or start processes, in order (filling ``result``);
    ``reload`` and ``logits_parity`` are the plan's, off for one file."""
    p, base_path, checkpoint_path = plan.params, plan.sources.base, plan.sources.checkpoint
    # One log folder for every child of this verification.
    log_dir = plan.log_dir or (default_log_dir() if reload or checkpoint_path else None)
    child = {"trust_remote_code": p.trust_remote_code, "timeout_s": p.reload_timeout_s, "log_dir": log_dir}
    if p.full_scan:
        result.scan = scan_tensors(insp.shards, checksum=p.checksum, on_progress=on_progress)
        result.findings += result.scan.findings
    if reload:
        _announce(on_progress, "reload: from_pretrained in a fresh process")
        attention = "eager" if p.attn_implementation == AUTO_ATTENTION else p.attn_implementation
        result.reload = reload_folder(insp.folder, dtype=p.dtype, attn_implementation=attention, **child)
        result.findings += reload_findings(result.reload)
    if base_path:
        base = inspect_checkpoint(base_path, trust_remote_code=p.trust_remote_code)
        result.findings += _prefixed(base, "base")
        if base.shards:
            comparison = compare_weights(insp, base, role="base", on_progress=on_progress)
            result.comparisons.append(comparison)
            result.findings += comparison.findings
    if not checkpoint_path and insp.kind != "file" and find_tag(insp.folder):
        checkpoint_path = insp.folder  # a Trainer checkpoint given as the weights: its own ZeRO states
    if checkpoint_path:
        _checkpoint(result, Path(checkpoint_path).expanduser(), logits_parity, p.consolidate_zero,
                    child, on_progress)


def _announce(on_progress, step: str) -> None:
    """Say which step starts: the reload, the parity and the consolidation each run a
    process for seconds with nothing read to count (a progress with no bytes to read)."""
    if on_progress is not None:
        on_progress(ScanProgress(step, 0, 0, 0, 0, "", 0.0))


def _prefixed(insp: Inspection, role: str) -> list[Finding]:
    """Another folder's findings, its files named as ``<folder>/<file>``."""
    name = Path(insp.path).name
    out = []
    for f in insp.findings:
        if role == "checkpoint" and f.cls == "no_weights":
            # ZeRO-3 without gathered weights leaves no safetensors in the checkpoint: legitimate.
            f = Finding("no_weights", f.file, f.message + " (a checkpoint may hold no full weights: "
                        "ZeRO-3 without gathered 16-bit weights, or LoRA adapters only; its ZeRO "
                        "states are what counts)", "info", f.tensors)
        out.append(Finding(f.cls, f"{name}/{f.file}" if not f.file.startswith(name) else f.file,
                           f"[{role}] {f.message}", f.severity, f.tensors))
    return out


def _checkpoint(result: WeightsResult, path: Path, parity: bool, zero: bool, child: dict,
                on_progress) -> None:
    insp = result.inspection
    same_folder = path.resolve() == insp.folder.resolve()
    if same_folder:
        ck = insp
    else:
        ck = inspect_checkpoint(path, trust_remote_code=child["trust_remote_code"])
        result.findings += _prefixed(ck, "checkpoint")
    if ck.shards and not same_folder:
        comparison = compare_weights(insp, ck, role="checkpoint", on_progress=on_progress)
        result.comparisons.append(comparison)
        result.findings += comparison.findings
        if parity and insp.kind != "file" and ck.kind != "file":
            _announce(on_progress, "logits parity: the weights against the checkpoint, in a fresh process")
            result.parity = compare_logits(insp.folder, ck.folder, **child)
            result.findings += parity_findings(result.parity)
    if ck.kind == "file":
        return
    result.zero, found = list_zero(ck.folder)
    result.findings += found
    if zero and result.zero.present:
        adapter = ck.folder / ADAPTER_FILE
        if (ck.folder / "adapter_config.json").is_file() and adapter.is_file():
            # LoRA: the ZeRO states hold the adapter's weights; the final folder holds them
            # merged into the base, which no tensor of the states can equal.
            targets = [("adapter", adapter)]
        else:
            targets = ([("checkpoint", ck.folder)] if ck.shards else []) + (
                [("weights", insp.folder)] if not same_folder and insp.shards else [])
        _announce(on_progress, "ZeRO states: zero_to_fp32 consolidation, in a fresh process")
        result.zero_compare = consolidate(ck.folder, targets, tag=result.zero.tag, **child)
        result.findings += zero_findings(result.zero_compare)
