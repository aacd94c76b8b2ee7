"""The whole verification of one checkpoint, in the order the notebook shows it.

1. headers, index and config (:mod:`.layout`), always;
2. the full scan (:mod:`.scan`) when ``full_scan``;
3. the reload in a fresh process (:mod:`.reload`) when ``reload``;
4. against a base (:mod:`.compare`, role ``base``) when ``base_path``;
5. against a checkpoint when ``checkpoint_path``: its tensors (role ``checkpoint``),
   its logits (:mod:`.parity`) when ``logits_parity``, its DeepSpeed ZeRO states listed
   (:mod:`.zero`) and, when ``consolidate_zero``, consolidated and compared with the
   exported weights (:mod:`.zero_consolidate`). A Trainer checkpoint given as the weights
   is its own checkpoint: its ZeRO states are listed and compared the same way.

Every problem becomes a finding; only bad arguments raise (``ValueError``,
``FileNotFoundError``: the command line turns them into one line and exit 2).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.weights.compare import compare_weights
from hyport_lib.checkpoint_files.findings import Finding, finding
from hyport_lib.weights.layout import Inspection, inspect_checkpoint
from hyport_lib.weights.parity import logits_parity as compare_logits, parity_findings
from hyport_lib.weights.reload import check_dtype, reload as reload_folder, reload_findings
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.runner import default_log_dir
from hyport_lib.weights.scan import CHECKSUMS, ScanProgress, full_scan as scan_tensors
from hyport_lib.weights.zero import find_tag, list_zero
from hyport_lib.weights.zero_consolidate import ADAPTER_FILE, consolidate, zero_findings


def verify_checkpoint(weights_path: os.PathLike, *, base_path: Optional[os.PathLike] = None,
                      checkpoint_path: Optional[os.PathLike] = None, full_scan: bool = False,
                      reload: bool = False, logits_parity: bool = False,
                      consolidate_zero: bool = False, dtype: str = "bfloat16",
                      attn_implementation: str = "eager", trust_remote_code: bool = False,
                      reload_timeout_s: float = 600.0, checksum: str = "crc32",
                      on_progress: Optional[Callable[[ScanProgress], None]] = None,
                      log_dir: Optional[os.PathLike] = None, source: str = "") -> WeightsResult:
    """Verify ``weights_path``; the arguments are those of :func:`hyport_lib.weights.stage.run`."""
    started = time.perf_counter()
    check_dtype(dtype)
    if checksum not in CHECKSUMS:
        raise ValueError(f"checksum={checksum!r}: expected one of {', '.join(CHECKSUMS)}")
    if not math.isfinite(float(reload_timeout_s)) or float(reload_timeout_s) <= 0:
        raise ValueError(f"reload_timeout_s={reload_timeout_s!r}: expected a positive number of seconds")
    for name, value in (("base path", base_path), ("checkpoint path", checkpoint_path)):
        if value and not Path(value).expanduser().exists():
            raise FileNotFoundError(f"{name} {str(value)!r}: no such file or folder")
    insp = inspect_checkpoint(weights_path, trust_remote_code=trust_remote_code)
    options = {"full_scan": full_scan, "reload": reload, "logits_parity": logits_parity,
               "consolidate_zero": consolidate_zero, "dtype": dtype,
               "attn_implementation": attn_implementation, "trust_remote_code": bool(trust_remote_code),
               "reload_timeout_s": float(reload_timeout_s), "checksum": checksum,
               "base_path": str(base_path) if base_path else None,
               "checkpoint_path": str(checkpoint_path) if checkpoint_path else None}
    result = WeightsResult(insp, options, findings=list(insp.findings), source=source)
    if (reload or logits_parity) and insp.kind == "file":
        # One file has no config.json beside it that is sure to belong to it: nothing to
        # load a model from. Said as a finding, so the header checks still count.
        asked = [n for n, on in (("reload", reload), ("logits check", logits_parity and checkpoint_path)) if on]
        if asked:
            two = len(asked) > 1
            result.findings.append(finding(
                "reload_skipped", insp.shards[0].label if insp.shards else str(weights_path),
                f"the {' and the '.join(asked)} need{'' if two else 's'} the model folder (config.json "
                f"beside the weights), not one file: skipped; give the folder to run "
                f"{'them' if two else 'it'}"))
        reload = logits_parity = False
    try:
        _checks(result, insp, base_path, checkpoint_path, full_scan, reload, logits_parity,
                consolidate_zero, dtype, attn_implementation, trust_remote_code, reload_timeout_s,
                checksum, on_progress, log_dir)
    except KeyboardInterrupt as exc:
        # Stopped: the checks that finished are kept; the caller finds them on the exception.
        result.findings.append(finding("verify_stopped", insp.path, "stopped by a signal before every "
                                       "check ran: the checks listed are the ones that finished"))
        result.wall_s = time.perf_counter() - started
        exc.partial = result
        raise
    result.wall_s = time.perf_counter() - started
    return result


def _checks(result: WeightsResult, insp: Inspection, base_path, checkpoint_path,
            full_scan: bool, reload: bool, logits_parity: bool, consolidate_zero: bool, dtype: str,
            attn_implementation: str, trust_remote_code: bool, reload_timeout_s: float, checksum: str,
            on_progress, log_dir) -> None:
    """The checks that read tensors or start processes, in order (filling ``result``)."""
    # One log folder for every child of this verification.
    log_dir = log_dir or (default_log_dir() if reload or checkpoint_path else None)
    child = {"trust_remote_code": trust_remote_code, "timeout_s": reload_timeout_s, "log_dir": log_dir}
    if full_scan:
        result.scan = scan_tensors(insp.shards, checksum=checksum, on_progress=on_progress)
        result.findings += result.scan.findings
    if reload:
        result.reload = reload_folder(insp.folder, dtype=dtype, attn_implementation=attn_implementation, **child)
        result.findings += reload_findings(result.reload)
    if base_path:
        base = inspect_checkpoint(base_path, trust_remote_code=trust_remote_code)
        result.findings += _prefixed(base, "base")
        if base.shards:
            comparison = compare_weights(insp, base, role="base", on_progress=on_progress)
            result.comparisons.append(comparison)
            result.findings += comparison.findings
    if not checkpoint_path and insp.kind != "file" and find_tag(insp.folder):
        checkpoint_path = insp.folder  # a Trainer checkpoint given as the weights: its own ZeRO states
    if checkpoint_path:
        _checkpoint(result, Path(checkpoint_path).expanduser(), logits_parity, consolidate_zero,
                    child, on_progress)


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
        result.zero_compare = consolidate(ck.folder, targets, tag=result.zero.tag, **child)
        result.findings += zero_findings(result.zero_compare)
