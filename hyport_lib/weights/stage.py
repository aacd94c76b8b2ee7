"""Stage 05's contract: :func:`plan` (resolve and check the folders, writing nothing),
:func:`run` and :func:`summarize`, used by notebook 05, ``hyport verify`` and
``hyport report``. The verdict: FAIL on any error finding, INTERRUPTED when stopped before
every check ran (with no error found), WARN on any warning, else PASS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from hyport_lib.params import ParameterError
from hyport_lib.results import INTERRUPTED, StageSummary
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.weights.defaults import build_tiny_sources, checked_label, resolve_paths
from hyport_lib.weights.params import NO_CHECKPOINT_FOR_LOGITS, Params
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.scan import ScanProgress
from hyport_lib.weights.verify import WeightsPlan, verify
from hyport_lib.weights.zero import find_tag

STAGE = "05_weights"
RESULT = WeightsResult


def plan(params: Params) -> WeightsPlan:
    """The folders to check (given, else stage 04's, else the tiny model's), checked.

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
    """Verify the planned folders (the tiny model's are built first when they stand in);
    ``on_progress`` is called while the scan and the comparisons read.

    Raises:
        KeyboardInterrupt: stopped; the checks that finished are on ``exc.partial``.
    """
    build_tiny_sources(plan.sources)
    return verify(plan, on_progress=on_progress)


def summarize(result: WeightsResult) -> StageSummary:
    """The verdict (see the module docstring), why, the seed's line and the index's figures."""
    verdict, why = _verdict(result)
    n = result.counts
    line = f"{result.seed_line()}; {n['error']} error(s), {n['warning']} warning(s)"
    if result.source.startswith("no stage 04"):  # never let the fallback read as the trained weights
        line = f"{checked_label(result.source)}: {line}"
    if verdict != "PASS":
        line += f": {why}"
    return StageSummary(verdict, line, _headline(result), why)


def _verdict(result: WeightsResult) -> tuple[str, str]:
    n = result.counts
    errors = [f for f in result.findings if f.severity == "error" and f.cls != "verify_stopped"]
    stopped = [f for f in result.findings if f.cls == "verify_stopped"]
    if stopped and not errors:  # an error found before the stop is still a FAIL
        return INTERRUPTED, stopped[0].message
    errors += stopped
    if errors:
        more = f" (+{len(errors) - 1} more error(s))" if len(errors) > 1 else ""
        return "FAIL", f"{errors[0].cls} in {errors[0].file}: {errors[0].message}{more}"
    if n["warning"]:
        first = next(f for f in result.findings if f.severity == "warning")
        return "WARN", f"{n['warning']} warning(s), first: {first.cls} in {first.file}"
    return "PASS", "no error or warning"


def _headline(result: WeightsResult) -> dict:
    n = result.counts
    out = {
        "shards": len(result.shards),
        "tensors": result.tensor_count,
        "parameters": result.parameters,
        "parameters without tied duplicates": result.parameters_without_tied,
        "model type": result.config.model_type,
        "errors": n["error"], "warnings": n["warning"],
        "LOAD_OK": result.reload.load_ok if result.reload else None,
    }
    if result.scan is not None:
        out["non-finite tensors"] = len(result.scan.nonfinite_tensors)
    base = result.comparison("base")
    if base is not None:
        out["tensors changed vs base"] = f"{base.changed}/{base.compared}"
    checkpoint = result.comparison("checkpoint")
    if checkpoint is not None:
        out["checkpoint tensors identical"] = f"{checkpoint.count('same')}/{len(checkpoint.rows)}"
    if result.parity is not None and result.parity.status == "ok":
        out["checkpoint max |Δ logits|"] = result.parity.max_abs_diff
    if result.zero_compare is not None and result.zero_compare.status == "ok":
        out["ZeRO fp32→saved max |Δ|"] = max((t["max_abs_cast"] for t in result.zero_compare.targets),
                                             default=None)
    return out


def result_data(result: WeightsResult) -> dict:
    """The result as recorded and as ``hyport verify --json`` prints it: with the verdict
    and why of :func:`summarize`."""
    summary = summarize(result)
    return {"verdict": summary.verdict, "why": summary.why, **to_mapping(result)}
