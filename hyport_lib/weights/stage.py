"""Stage 05: the weights — the stage id, the stage function and its record.

The notebook and ``hyport verify`` both pick the folders with :func:`resolve_paths`
(what was given, else what stage 04 recorded in this run, else the embedded tiny
model), verify them with :func:`run` and record with :func:`record`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.results import StageSummary, record_summary
from hyport_lib.weights.defaults import checked_label, resolve_paths  # noqa: F401  (resolve_paths: stage API)
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.scan import ScanProgress
from hyport_lib.weights.verify import verify_checkpoint

STAGE = "05_weights"


def run(weights_path: Optional[os.PathLike] = None, *, base_path: Optional[os.PathLike] = None,
        checkpoint_path: Optional[os.PathLike] = None, full_scan: bool = False,
        reload: bool = False, logits_parity: bool = False, consolidate_zero: bool = False,
        dtype: str = "bfloat16", attn_implementation: str = "eager",
        trust_remote_code: bool = False, reload_timeout_s: float = 600.0,
        checksum: str = "crc32", on_progress: Optional[Callable[[ScanProgress], None]] = None,
        log_dir: Optional[os.PathLike] = None, source: str = "") -> WeightsResult:
    """The stage function: verify ``weights_path`` (None: :func:`resolve_paths` picks).

    Args:
        weights_path: a checkpoint folder (sharded or single-file) or one safetensors file.
        base_path: the model before fine-tuning: training must have changed the weights.
        checkpoint_path: a folder that should hold the same model (e.g. the last
            ``checkpoint-N/``): tensors compared, and its DeepSpeed ZeRO states listed.
        full_scan: read every tensor: NaN/Inf and a checksum per tensor.
        reload: ``from_pretrained`` in a fresh process, as the seed did (``LOAD_OK``).
        logits_parity: also compare the logits of the weights and the checkpoint.
        consolidate_zero: consolidate the checkpoint's ZeRO states with DeepSpeed's
            ``zero_to_fp32`` (loads every rank's optimizer states) and compare.
        dtype, attn_implementation: how the reload loads the model.
        trust_remote_code: let transformers run the checkpoint's own code (off unless asked).
        reload_timeout_s: limit of each child process (reload, parity, consolidation).
        checksum: ``crc32`` or ``sha256`` (full scan).
        on_progress: called while the scan and the comparisons read.
        log_dir: where the child processes' logs go.
        source: where the paths came from, for the record.
    """
    if weights_path is None:
        picked = resolve_paths(None, base_path, checkpoint_path)
        weights_path, base_path, checkpoint_path = picked.weights, picked.base, picked.checkpoint
        source = source or picked.note
    return verify_checkpoint(
        weights_path, base_path=base_path, checkpoint_path=checkpoint_path, full_scan=full_scan,
        reload=reload, logits_parity=logits_parity, consolidate_zero=consolidate_zero, dtype=dtype,
        attn_implementation=attn_implementation, trust_remote_code=trust_remote_code,
        reload_timeout_s=reload_timeout_s, checksum=checksum, on_progress=on_progress,
        log_dir=log_dir, source=source)


def summarize(result: WeightsResult) -> StageSummary:
    verdict, why = result.verdict()
    n = result.counts
    line = f"{result.seed_line()}; {n['error']} error(s), {n['warning']} warning(s)"
    if result.source.startswith("no stage 04"):  # never let the fallback read as the trained weights
        line = f"{checked_label(result.source)}: {line}"
    if verdict != "PASS":
        line += f": {why}"
    return StageSummary(verdict, line, result.headline())


def record(result: WeightsResult, *, directory: Optional[os.PathLike] = None,
           stage: Optional[str] = None) -> Path:
    """Write the stage result (labelled CPU: every check here runs on the CPU)."""
    return record_summary(stage or STAGE, summarize(result), data=result.to_dict(),
                          provenance=result.provenance, directory=directory)
