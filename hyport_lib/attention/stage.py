"""Stage 02: the numerics grid (:mod:`~hyport_lib.attention.compare`), the model-level check
(:mod:`~hyport_lib.proof.model_check`) and the static scan and port of the model code."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.attention.compare import BackendInfo, ComparisonResult, error_ratio, run_comparison
from hyport_lib.attention.implementations import device_label
from hyport_lib.attention.params import Params
from hyport_lib.backend import get_backend
from hyport_lib.memory.capacity import capacity
from hyport_lib.models.preflight import check_decoder_only, check_model_path
from hyport_lib.models.tiny import TINY_MODEL_NAME, ensure_tiny_model
from hyport_lib.npu_attention.flash_api import DEFAULT_VERSION
from hyport_lib.port.proof_run import SKIP, proof_not_run, prove_port_in_child
from hyport_lib.port.tree import PortError, PortResult, port_tree, write_record
from hyport_lib.proof.model_check import ModelComparison, compare_model, model_check_dtype, swapped_backend
from hyport_lib.proof.model_check_memory import CheckMemory, plan_check_memory
from hyport_lib.results import REFUSED, StageSummary, fresh_folder_beside_results, worst_verdict
from hyport_lib.scan.hits import ScanReport
from hyport_lib.scan.scanner import scan_path
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.utils.wording import counted

STAGE = "02_attention"
#: What the static scan reads when no ``code_path`` is given.
PLANTED_EXAMPLE = '''\
"""A model file as it often arrives from a CUDA codebase (planted by hyport)."""
import torch
from flash_attn import flash_attn_func, flash_attn_varlen_func
from flash_attn.bert_padding import pad_input, unpad_input


class Attention(torch.nn.Module):
    def forward(self, q, k, v, cu_seqlens=None, max_seqlen=None):
        if cu_seqlens is not None:
            return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens,
                                          max_seqlen, max_seqlen, causal=True)
        return flash_attn_func(q, k, v, causal=True)


def load(path):
    model = torch.load(path).cuda()
    torch.cuda.synchronize()
    return model.to("cuda")
'''
PLANTED_REQUIREMENTS = "torch\nflash-attn==2.6.3\ntransformers\n"


def planted_example(directory=None) -> Path:
    """The planted example's folder (a model file + requirements), written now: a fixed
    folder, rewritten on each call, so that runs do not pile up temporary folders."""
    folder = Path(directory) if directory else Path(tempfile.gettempdir()) / "hyport-planted-example"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modeling_example.py").write_text(PLANTED_EXAMPLE, encoding="utf-8")
    (folder / "requirements.txt").write_text(PLANTED_REQUIREMENTS, encoding="utf-8")
    return folder


def run_scan(code_path: str = "") -> ScanReport:
    """The scan of ``code_path`` (empty: the planted example, written first)."""
    return scan_path(str(code_path or "").strip() or str(planted_example()))


@dataclass
class Plan:
    """What :func:`run` does, checked; ``"tiny"`` is built (or found in its cache) when it
    runs: a plan writes nothing."""

    params: Params
    device: str  # the backend kind eager and sdpa run on
    model_path: Optional[str]  # None: no model check
    flash_attn_version: str
    port_out: Optional[Path] = None  # a fresh folder beside the results; None: no port
    #: the memory model's decision on the model check (None: no model, or the tiny one)
    memory: Optional[CheckMemory] = None

    @property
    def left_out(self) -> list[str]:
        """What the host cannot run, said before the run (the report's pre-check reads it)."""
        return [self.memory.left_out] if self.memory is not None and self.memory.left_out else []


#: :attr:`CaseProgress.step` while the comparison grid runs.
GRID_STEP = "grid"


@dataclass(frozen=True)
class CaseProgress:
    """``done`` of the grid's ``total`` cases, then once as each later step starts (the
    model check, the scan, the port), which take seconds with nothing to count."""

    done: int
    total: int
    step: str = GRID_STEP


@dataclass
class AttentionStageResult(ComparisonResult):
    """The grid, the model-level check, the scan of the code (``scan.root``: the planted
    example when no path was given) and its port (``model``, ``port``: None when not made)."""

    model: Optional[ModelComparison] = None
    flash_attn_version: str = ""
    scan: Optional[ScanReport] = None
    port: Optional[PortResult] = None
    port_error: str = ""  # why the port could not be made (the destination in the way, ...)


RESULT = AttentionStageResult


def plan(params: Params) -> Plan:
    """Checked before the grid's minutes.

    Raises:
        RuntimeError: the device asked for is not usable here (the host, not a value).
        ModelPathError: ``model_path`` is no loadable local model folder.
    """
    backend = get_backend(params.device)
    device = backend.kind
    model_path, memory = params.model_path, None
    if model_path is not None and model_path != TINY_MODEL_NAME:  # the tiny model: a few MiB
        model_path = check_model_path(model_path, local_only="stage 02 (the model check)")
        check_decoder_only(model_path, "stage 02's model check")  # before the grid's minutes
        memory = plan_check_memory(model_path, kind=device, dtype=model_check_dtype(params.model_dtype, device),
                                   capacity=capacity(backend, params.card_memory_gib),
                                   trust_remote_code=params.trust_remote_code)
    code_path = str(params.code_path or "").strip()
    port_out = None
    if params.port and code_path:
        port_out = fresh_folder_beside_results("ports", Path(code_path).resolve().name)
    return Plan(params, device, model_path, params.flash_attn_version or DEFAULT_VERSION, port_out, memory)


def run(plan: Plan, *, on_progress: Optional[Callable[[CaseProgress], None]] = None) -> AttentionStageResult:
    params = plan.params
    progress = None if on_progress is None else (lambda done, total: on_progress(CaseProgress(done, total)))

    def starting(step: str) -> None:
        if on_progress is not None:
            on_progress(CaseProgress(comparison.cases, comparison.cases, step))

    comparison = run_comparison(device=plan.device, seed=params.seed, full=params.full,
                                dtypes=params.dtypes, progress=progress,
                                flash_attn_version=plan.flash_attn_version)
    model = None
    if plan.model_path is not None:
        starting("model check: eager against the swap, on the model")
        model_path = str(ensure_tiny_model()) if plan.model_path == TINY_MODEL_NAME else plan.model_path
        backend, where = swapped_backend(plan.device)
        model = compare_model(model_path, backend=backend, device=where, seed=params.seed,
                              dtype=model_check_dtype(params.model_dtype, plan.device),
                              trust_remote_code=params.trust_remote_code,
                              flash_attn_version=plan.flash_attn_version,
                              behaviour_left_out=plan.memory.left_out if plan.memory is not None else "")
        model.memory = plan.memory.lines if plan.memory is not None else []
    starting("scan: CUDA-only constructs in the code")
    scan = run_scan(params.code_path)
    if plan.port_out is not None:
        starting("port: rewriting the code")
    port, port_error = (None, "") if plan.port_out is None else port_and_prove(plan, starting)
    return AttentionStageResult(**vars(comparison), model=model, flash_attn_version=plan.flash_attn_version,
                                scan=scan, port=port, port_error=port_error)


def port_and_prove(plan: Plan, starting: Callable[[str], None] = lambda step: None
                   ) -> tuple[Optional[PortResult], str]:
    """``hyport port`` of ``code_path`` and its proof (in a child process, with ``port_proof``
    only: it runs the user's code); ``(None, reason)`` when the port cannot be made.
    ``starting(step)`` is told before the proof (a stop asked during the port is taken there)."""
    params = plan.params
    try:
        port = port_tree(params.code_path, plan.port_out)
    except (PortError, OSError) as exc:  # the grid's and the model check's results are kept
        return None, f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
    if not port.changes:
        return port, ""  # nothing was rewritten: nothing to prove
    if params.port_proof:
        starting(f"port proof: the ported code on a tiny model, in a child process "
                 f"(at most {params.port_proof_timeout_s:g} s)")
    proof = prove_port_in_child(port.src, port.dst, seed=params.seed,
                                config_overrides=params.port_proof_config,
                                timeout_s=params.port_proof_timeout_s,
                                timeout_setting="port_proof_timeout_s",
                                config_setting="port_proof_config") \
        if params.port_proof else proof_not_run(port.src, port.dst, "set port_proof=true")
    port.proof = proof
    write_record(port)
    return port, ""


def where_each_ran(backends: list[BackendInfo]) -> str:
    """``"eager, sdpa on CUDA; npu-emulated on CPU"``: every implementation's device."""
    by_device: dict[str, list[str]] = {}
    for b in backends:
        by_device.setdefault(device_label(b.device), []).append(b.name)
    return "; ".join(f"{', '.join(names)} on {device}" for device, names in by_device.items())


def summarize(result: AttentionStageResult) -> StageSummary:
    counts, model = result.counts, result.model
    primary, rows = result.npu_rows()
    worst = error_ratio(rows).max()
    # The grid's: its worst row (SKIP: no row ran), made worse by the model check and the port.
    verdict = worst_verdict(result.frame()["verdict"])
    if model is not None and model.verdict == "FAIL":
        verdict = "FAIL"
    elif model is not None and model.verdict in ("WARN", REFUSED) and verdict == "PASS":
        # REFUSED: the swap says plainly that it cannot serve this model (training keeps
        # eager attention): a limit to know, not a wrong result.
        verdict = "WARN"
    headline = {
        "cases": result.cases,
        "rows PASS/WARN/FAIL": f"{counts.get('PASS', 0)}/{counts.get('WARN', 0)}/{counts.get('FAIL', 0)}",
        f"worst {primary} err/bound": None if math.isnan(worst) else round(float(worst), 3),
    }
    if model is not None and model.max_abs_logits is not None:
        headline["model max |Δ logits|"] = float(f"{model.max_abs_logits:.3g}")
        headline["greedy identical"] = model.greedy_identical
        headline["swapped-attention calls per forward"] = model.swapped_calls
    headline["scan findings"] = len(result.scan.hits)
    headline["flash-attn API served"] = result.flash_attn_version
    line = (f"{result.cases} cases × {len(result.backends)} backends vs float64 "
            f"({where_each_ran(result.backends)}): {counts.get('FAIL', 0)} FAIL, "
            f"{counts.get('WARN', 0)} WARN")
    if model is not None:
        line += f"; model {model.verdict}" + (f" ({model.detail})" if model.verdict == REFUSED else "")
        if model.behaviour is not None and model.behaviour.meaningful:
            line += f"; {model.behaviour.line()}"
            headline["greedy answers identical"] = ", ".join(
                f"{p.dtype} {'not compared' if p.not_compared else 'yes' if p.identical else 'no'}"
                for p in model.behaviour.pairs)
        elif model.left_out:
            line += f"; left out: {model.left_out}"
            headline["behaviour check"] = "left out: the whole model does not fit"
    if result.port_error:
        verdict = "FAIL"
        line += f"; port not made: {result.port_error}"
    elif result.port is not None:
        port, proof = result.port, result.port.proof
        headline["port changes"] = len(port.changes)  # none when there is no proof
        headline["port spots left for a human"] = len(port.manual)
        if proof is None:
            line += f"; port: nothing to rewrite, {len(port.manual)} left for a human"
        else:
            emulated = " (emulated)" if proof.emulated else ""
            headline["port proof"] = proof.verdict + emulated
            if proof.verdict == "WARN" and verdict == "PASS":
                verdict = "WARN"  # a port with no model class to prove it on
            elif proof.verdict not in ("PASS", "WARN", SKIP):  # SKIP: not asked for
                verdict = "FAIL"
            line += (f"; port: {counted(len(port.changes), 'change')}, {len(port.manual)} left for a human, "
                     f"proof {proof.verdict}" + (" (NPU path emulated on CPU)" if emulated else ""))
    return StageSummary(verdict, line, headline)


def result_data(result: AttentionStageResult) -> dict:
    """The fields, and the scan with the path it read first (``path``)."""
    return {**to_mapping(result), "scan": {"path": result.scan.root, **result.scan.to_dict()}}
