"""Stage 05: the weights — the stage contract.

:func:`plan` resolves the folders (those given, else what stage 04 recorded in this run,
else the embedded tiny model in two shards) and checks them, writing nothing;
:func:`run` verifies them; :func:`summarize` and :func:`record` keep the result. Notebook
05, ``hyport verify`` and ``hyport report`` all go through these.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.params import ParameterError
from hyport_lib.results import StageSummary, record_summary
from hyport_lib.weights.defaults import build_tiny_sources, checked_label, resolve_paths
from hyport_lib.weights.params import NO_CHECKPOINT_FOR_LOGITS, Params
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.scan import ScanProgress
from hyport_lib.weights.verify import WeightsPlan, verify
from hyport_lib.weights.zero import find_tag

STAGE = "05_weights"


def plan(params: Params) -> WeightsPlan:
    """The folders to check, resolved and checked; nothing is written.

    The children's logs go to a fresh folder beside the results (``hyport verify
    --log-dir`` sets :attr:`WeightsPlan.log_dir` instead).

    Raises:
        ParameterError: a folder given that does not exist, or a check that needs a
            checkpoint where there is none.
        ValueError: no folder given, and stage 04 trained no weights to check.
    """
    sources = resolve_paths(params.weights_path, params.base_path, params.checkpoint_path)
    problems = []
    # base_path is checked where it is declared (it must exist); the other two may be
    # written by stage 04 of the same run, so they are checked here, when 05 runs.
    for key in ("weights_path", "checkpoint_path"):
        value = getattr(params, key)
        if value and not Path(value).expanduser().exists():
            problems.append(f"{key}={value!r}: no such file or folder")
    # Asked for and impossible: an error, never a PASS that silently left the check out.
    if params.logits_parity and not sources.checkpoint:
        problems.append(NO_CHECKPOINT_FOR_LOGITS)
    if params.consolidate_zero and not sources.checkpoint and not _trainer_checkpoint(sources.weights):
        problems.append("consolidate_zero=True consolidates a checkpoint's ZeRO states, and there is "
                        "none: give checkpoint_path or set consolidate_zero=False")
    if problems:
        raise ParameterError(problems)
    return WeightsPlan(params, sources)


def _trainer_checkpoint(weights: str) -> bool:
    """The weights folder is a Trainer checkpoint with ZeRO states: its own checkpoint."""
    folder = Path(weights).expanduser()
    return folder.is_dir() and find_tag(folder) is not None


def run(plan: WeightsPlan, *,
        on_progress: Optional[Callable[[ScanProgress], None]] = None) -> WeightsResult:
    """Verify the planned folders (the tiny model's are built first when they stand in).

    Args:
        plan: from :func:`plan`.
        on_progress: called while the scan and the comparisons read; None: silent.

    Raises:
        KeyboardInterrupt: stopped; the checks that finished are on ``exc.partial``.
    """
    build_tiny_sources(plan.sources)
    return verify(plan, on_progress=on_progress)


def summarize(result: WeightsResult) -> StageSummary:
    verdict, why = result.verdict()
    n = result.counts
    line = f"{result.seed_line()}; {n['error']} error(s), {n['warning']} warning(s)"
    if result.source.startswith("no stage 04"):  # never let the fallback read as the trained weights
        line = f"{checked_label(result.source)}: {line}"
    if verdict != "PASS":
        line += f": {why}"
    return StageSummary(verdict, line, result.headline())


def record(result: WeightsResult, *, directory: Optional[os.PathLike] = None) -> Path:
    """Write the stage result (labelled CPU: every check here runs on the CPU)."""
    return record_summary(STAGE, summarize(result), data=result.to_dict(),
                          provenance=result.provenance, directory=directory)
