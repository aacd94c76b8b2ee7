"""Stage 05's contract, used by notebook 05, ``hyport verify`` and ``hyport report``; the
checks run in docs/weights.md's order. A Trainer checkpoint given as the weights is its own
checkpoint. The verdict: FAIL on any error finding, INTERRUPTED when stopped before every
check ran (with no error found), WARN on any warning, else PASS.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.memory.fit import DoesNotFit
from hyport_lib.npu_attention.runnable import LOAD, check_attention, resolve_kind
from hyport_lib.params import AUTO_ATTENTION, ParameterError
from hyport_lib.results import INTERRUPTED, SKIP, StageSummary
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.weights.compare import compare_weights
from hyport_lib.weights.defaults import Sources, build_tiny_sources, checked_label, resolve_paths
from hyport_lib.weights.layout import Inspection, inspect_checkpoint
from hyport_lib.weights.memory_plan import plan_parity, plan_reload
from hyport_lib.weights.params import NO_CHECKPOINT_FOR_LOGITS, Params
from hyport_lib.weights.reload import default_log_dir, logits_parity, parity_findings, reload, reload_findings
from hyport_lib.weights.result import WeightsResult, inspected
from hyport_lib.weights.scan import ScanProgress, full_scan
from hyport_lib.weights.zero import ADAPTER_FILE, consolidate, find_tag, list_zero, zero_findings
from hyport_lib.utils.wording import counted

STAGE = "05_weights"
RESULT = WeightsResult


@dataclass
class WeightsPlan:
    """``log_dir``: the child processes' logs; None: a fresh folder beside the results, made
    when the first child starts."""

    params: Params
    sources: Sources
    log_dir: Optional[Path] = None


def plan(params: Params) -> WeightsPlan:
    """The folders to check: those given, else stage 04's, else the tiny model's.
    ParameterError: a folder given that does not exist, a check that needs a checkpoint where
    there is none, or an attention this host cannot run; ValueError: stage 04 trained none to check, or (DoesNotFit) the RAM is short."""
    sources = resolve_paths(params.weights_path, params.base_path, params.checkpoint_path)
    if sources.skip:  # a node > 0 (the checks are node 0's) or a stopped stage 04: none is refused here
        return WeightsPlan(params, sources)
    problems = []
    # base_path is checked where it is declared (it must exist); the other two may be
    # written by stage 04 of the same run, so they are checked here, when 05 runs.
    for key in ("weights_path", "checkpoint_path"):
        value = getattr(params, key)
        # os.path: a path the system refuses to look up (too long, a folder not entered)
        # is no folder here, never an internal error
        if value and not os.path.exists(os.path.expanduser(value)):
            problems.append(f"{key}={value!r}: no such file or folder")
    # Asked for and impossible: an error, never a PASS that silently left the check out.
    if params.logits_parity and not sources.checkpoint:
        problems.append(NO_CHECKPOINT_FOR_LOGITS)
    if params.consolidate_zero and not sources.checkpoint and not _trainer_checkpoint(sources.weights):
        problems.append("consolidate_zero=True consolidates a checkpoint's ZeRO states, and there is "
                        "none: give checkpoint_path or set consolidate_zero=False")
    try:  # the reload runs on this host: its kind judges the attention
        check_attention(params.attn_implementation, resolve_kind("auto"), work=LOAD)
    except ParameterError as exc:
        problems.append(str(exc))
    if problems:
        raise ParameterError(problems)
    _plan_memory(params, sources)
    return WeightsPlan(params, sources)


def _plan_memory(params: Params, sources: Sources) -> None:
    """The reload and the parity of folders that exist now, judged before anything loads;
    stage 04's folders of the same run are judged when this stage runs (:func:`_planned`)."""
    weights = Path(sources.weights).expanduser()
    if sources.tiny or not weights.is_dir():
        return  # the tiny model (a few MB), or one file: nothing to reload
    if params.reload:
        plan_reload(weights, params.dtype)
    checkpoint = Path(sources.checkpoint).expanduser() if sources.checkpoint else None
    if params.logits_parity and checkpoint is not None and checkpoint.is_dir():
        plan_parity(weights, checkpoint)


def _trainer_checkpoint(weights: str) -> bool:
    folder = Path(weights).expanduser()
    return os.path.isdir(folder) and find_tag(folder) is not None


def run(plan: WeightsPlan, *,
        on_progress: Optional[Callable[[ScanProgress], None]] = None) -> WeightsResult:
    """Each problem a finding (the tiny model's folders are built first when they stand
    in); ``on_progress`` is called while the scan and the comparisons read. Stopped: the
    KeyboardInterrupt carries the checks that finished on ``exc.partial``."""
    if plan.sources.skip:
        return WeightsResult(plan.sources.note, skipped=plan.sources.skip)
    build_tiny_sources(plan.sources)
    started = time.perf_counter()
    p, sources = plan.params, plan.sources
    insp = inspect_checkpoint(sources.weights, trust_remote_code=p.trust_remote_code)
    # The parameters as run: the folders as resolved, not as given.
    options = {**{f.name: getattr(p, f.name) for f in fields(p) if f.name != "weights_path"},
               "base_path": sources.base, "checkpoint_path": sources.checkpoint}
    result = inspected(insp, options, sources.note)
    reload_asked, parity_asked = p.reload, p.logits_parity
    if (reload_asked or parity_asked) and insp.kind == "file":
        # One file has no config.json beside it that is sure to belong to it: nothing to
        # load a model from. Said as a finding, so the header checks still count.
        asked = [n for n, on in (("reload", reload_asked), ("logits check", parity_asked and sources.checkpoint))
                 if on]
        if asked:
            two = len(asked) > 1
            result.findings.append(Finding(
                "reload_skipped", insp.shards[0].label if insp.shards else sources.weights,
                f"the {' and the '.join(asked)} need{'' if two else 's'} the model folder (config.json "
                f"beside the weights), not one file: skipped; give the folder to run "
                f"{'them' if two else 'it'}"))
        reload_asked = parity_asked = False
    try:
        _checks(result, insp, plan, reload_asked, parity_asked, on_progress)
    except KeyboardInterrupt as exc:
        result.findings.append(Finding("verify_stopped", insp.path, "stopped by a signal before every "
                                       "check ran: the checks listed are the ones that finished"))
        result.wall_s = time.perf_counter() - started
        exc.partial = result
        raise
    result.wall_s = time.perf_counter() - started
    return result


def _checks(result: WeightsResult, insp: Inspection, plan: WeightsPlan, reload_asked: bool,
            parity_asked: bool, on_progress) -> None:
    """The checks that read tensors or start processes (the two flags off for one file)."""
    p, base_path, checkpoint_path = plan.params, plan.sources.base, plan.sources.checkpoint
    # One log folder for every child of this verification.
    log_dir = plan.log_dir or (default_log_dir() if reload_asked or checkpoint_path else None)
    child = {"trust_remote_code": p.trust_remote_code, "timeout_s": p.reload_timeout_s, "log_dir": log_dir}
    if p.full_scan:
        result.scan = full_scan(insp.shards, checksum=p.checksum, on_progress=on_progress)
        result.findings += result.scan.findings
    if reload_asked and _planned(result, "reload", lambda: plan_reload(insp.folder, p.dtype)):
        _announce(on_progress, "reload: from_pretrained in a fresh process")
        attention = "eager" if p.attn_implementation == AUTO_ATTENTION else p.attn_implementation
        result.reload = reload(insp.folder, dtype=p.dtype, attn_implementation=attention, **child)
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
        _checkpoint(result, Path(checkpoint_path).expanduser(), parity_asked, p.consolidate_zero,
                    child, on_progress)


def _planned(result: WeightsResult, check: str, planner) -> bool:
    """Whether the reload or the parity (``check``) fits this host's RAM, its plan recorded;
    where it does not (folders written after the plan), it is left out with the figures."""
    try:
        setattr(result, f"{check}_memory", planner())
    except DoesNotFit as exc:
        what = "logits parity" if check == "parity" else check
        result.findings.append(Finding("does_not_fit", Path(result.path).name, f"the {what} was left out: {exc}"))
        return False
    return True


def _announce(on_progress, step: str) -> None:
    """The reload, the parity and the consolidation each run a process for seconds with
    nothing read to count: a progress with no bytes says which step runs."""
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
        if parity and insp.kind != "file" and ck.kind != "file" and \
                _planned(result, "parity", lambda: plan_parity(insp.folder, ck.folder)):
            _announce(on_progress, "logits parity: the weights against the checkpoint, in a fresh process")
            result.parity = logits_parity(insp.folder, ck.folder, **child)
            result.findings += parity_findings(result.parity)
    if ck.kind == "file":
        return
    result.zero, found = list_zero(ck.folder)
    incomplete = [f for f in found if f.cls == "zero_incomplete"]
    if zero and incomplete:  # DeepSpeed would fail on it, or consolidate what is there as if whole
        incomplete[0].message += "; not consolidated: only a complete checkpoint is"
        # asked for and impossible: an error, even where the part held is all a node-local
        # folder should hold
        incomplete[0].severity = "error"
    result.findings += found
    if zero and result.zero.present and not incomplete:
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


def summarize(result: WeightsResult) -> StageSummary:
    if result.skipped:
        return StageSummary(SKIP, result.skipped, {}, result.skipped)
    verdict, why = _verdict(result)
    n = result.counts
    line = f"{result.seed_line()}; {counted(n['error'], 'error')}, {counted(n['warning'], 'warning')}"
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
        more = f" (+{counted(len(errors) - 1, 'more error')})" if len(errors) > 1 else ""
        return "FAIL", f"{errors[0].cls} in {errors[0].file}: {errors[0].message}{more}"
    if n["warning"]:
        first = next(f for f in result.findings if f.severity == "warning")
        return "WARN", f"{counted(n['warning'], 'warning')}, first: {first.cls} in {first.file}"
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
