"""Stage 02: the attention swap — the stage id, the stage function and its record.

One stage function, :func:`run`, does what both the notebook and ``hyport attention``
show: the numerics grid of every attention implementation against float64
(:mod:`~hyport_lib.attention.compare`), the model-level check of eager against the
swapped attention (:mod:`~hyport_lib.attention.model_check`) and the static scan of
the model code (:mod:`~hyport_lib.attention.port_scan`). :func:`record` writes the
stage result through :mod:`hyport_lib.results`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hyport_lib.attention.cases import DTYPES
from hyport_lib.attention.compare import ComparisonResult, provenance, run_comparison
from hyport_lib.attention.model_check import ModelComparison, compare_model, swapped_backend
from hyport_lib.attention.port_scan import run_scan
from hyport_lib.results import StageSummary, record_summary

STAGE = "02_attention"


def check_parameters(params: dict) -> None:
    """Before a report runs anything: the grid's dtypes, the folder to scan and the model
    of the model check (each error names the parameter).

    Raises:
        ValueError: naming the parameter, its value and what it accepts.
    """
    from hyport_lib.models.preflight import check_model_path

    dtypes = params.get("dtypes")
    if dtypes is not None:
        if isinstance(dtypes, str) or not isinstance(dtypes, (list, tuple)) or not dtypes:
            raise ValueError(f"dtypes={dtypes!r}: a non-empty list of {', '.join(DTYPES)}")
        unknown = [d for d in dtypes if d not in DTYPES]
        if unknown:
            raise ValueError(f"dtypes={list(dtypes)!r}: {', '.join(map(repr, unknown))} not among "
                             f"{', '.join(DTYPES)}")
    code_path = str(params.get("code_path") or "").strip()
    if code_path and not Path(code_path).expanduser().exists():
        raise ValueError(f"code_path={code_path!r}: no such file or folder to scan")
    model_path = params.get("model_path")
    if model_path is not None and str(model_path).strip().lower() not in ("", "none"):
        check_model_path(model_path, local_only="stage 02 (the model check)")


@dataclass
class AttentionStageResult:
    """Everything stage 02 found.

    Attributes:
        comparison: the case × implementation grid against float64.
        model: eager vs swapped attention on the model; None when skipped.
        scan: the static scan's report; None when the scan module is absent.
        scanned_path: what was scanned (the planted example when no path was given).
    """

    comparison: ComparisonResult
    model: Optional[ModelComparison] = None
    scan: Any = None
    scanned_path: str = ""
    flash_attn_version: str = ""  # whose API the flash-attn drop-in served

    def to_dict(self) -> dict:
        c = self.comparison
        return {"rows": c.rows, "backends": c.backends, "notes": c.notes,
                "seconds": c.seconds, "full": c.full,
                "model": self.model.to_dict() if self.model is not None else None,
                "flash_attn_version": self.flash_attn_version,
                "scan": ({"path": self.scanned_path, **self.scan.to_dict()}
                         if self.scan is not None else None)}


def run(device: str = "auto", *, seed: int = 0, full: bool = False,
        dtypes: Sequence[str] = DTYPES, code_path: str = "", model_path: Optional[str] = "tiny",
        flash_attn_version: Optional[str] = None, trust_remote_code: bool = False,
        progress: Optional[Callable[[int, int], None]] = None) -> AttentionStageResult:
    """The whole stage: the grid, the model-level check, the scan.

    Args:
        device: where eager and sdpa run (``auto``, ``cpu``, ``cuda``, ``npu``).
        seed: seeds the grid's inputs and the model check.
        full: the bigger grid.
        dtypes: dtypes of the grid.
        code_path: folder or file to scan; empty: a small planted example.
        model_path: model for the eager-vs-swapped check (``tiny``, a folder);
            None or ``"none"`` skips it.
        flash_attn_version: the flash-attn version whose API the drop-in serves (the
            version the model code pins; ``unpad_input`` returns 4 values before 2.7);
            None: the shim's default. The scan names the pinned one.
        trust_remote_code: the model check loads the checkpoint's own model code, with
            the flash_attn shim in place for it (off by default).
        progress: ``progress(done, total)`` after each grid case.
    """
    from hyport_lib.npu_attention.shim import DEFAULT_VERSION

    from hyport_lib.utils.values import as_flag
    from hyport_lib.models.preflight import check_model_path

    wanted = model_path is not None and str(model_path).strip().lower() not in ("", "none")
    if wanted:  # before the grid's minutes: a wrong path is named at once
        model_path = check_model_path(model_path)
    version = flash_attn_version or DEFAULT_VERSION
    comparison = run_comparison(device=device, seed=seed, full=full, dtypes=list(dtypes),
                                progress=progress, flash_attn_version=version)
    model = None
    if wanted:
        backend, where = swapped_backend(comparison.device)
        model = compare_model(model_path, backend=backend, device=where, seed=seed,
                              trust_remote_code=as_flag("trust_remote_code", trust_remote_code),
                              flash_attn_version=version)
    scan, scanned = run_scan(code_path)
    return AttentionStageResult(comparison, model, scan, scanned, version)


def where_each_ran(backends: list[dict]) -> str:
    """``"eager, sdpa on CUDA; npu-emulated on CPU"``: every implementation's device."""
    from hyport_lib.attention.implementations import device_label

    by_device: dict[str, list[str]] = {}
    for b in backends:
        by_device.setdefault(device_label(b.get("device", "cpu")), []).append(b["name"])
    return "; ".join(f"{', '.join(names)} on {device}" for device, names in by_device.items())


def summarize(result: AttentionStageResult) -> StageSummary:
    """Stage verdict (the grid's, made worse by the model check), line and figures."""
    comparison, model = result.comparison, result.model
    counts = comparison.counts
    npu_rows = [r for r in comparison.rows
                if r.get("max_abs") is not None and r["backend"] in ("npu", "npu-emulated")]
    primary = "npu" if any(r["backend"] == "npu" for r in npu_rows) else "npu-emulated"
    worst = max((r["max_abs"] / r["bound"] for r in npu_rows
                 if r["backend"] == primary and r["bound"]), default=None)
    verdict = comparison.verdict
    if model is not None and model.verdict == "FAIL":
        verdict = "FAIL"
    elif model is not None and model.verdict == "WARN" and verdict == "PASS":
        verdict = "WARN"
    headline = {
        "cases": comparison.cases,
        "rows PASS/WARN/FAIL": f"{counts.get('PASS', 0)}/{counts.get('WARN', 0)}/{counts.get('FAIL', 0)}",
        f"worst {primary} err/bound": None if worst is None else round(worst, 3),
    }
    if model is not None and model.max_abs_logits is not None:
        headline["model max |Δ logits|"] = float(f"{model.max_abs_logits:.3g}")
        headline["greedy identical"] = model.greedy_identical
        headline["swapped-attention calls per forward"] = model.swapped_calls
    if result.scan is not None:
        headline["scan findings"] = len(result.scan.hits)
    if result.flash_attn_version:
        headline["flash-attn API served"] = result.flash_attn_version
    line = (f"{comparison.cases} cases × {len(comparison.backends)} backends vs float64 "
            f"({where_each_ran(comparison.backends)}): {counts.get('FAIL', 0)} FAIL, "
            f"{counts.get('WARN', 0)} WARN")
    if model is not None:
        line += f"; model {model.verdict}"
    return StageSummary(verdict, line, headline)


def record(result: AttentionStageResult, *, directory: Optional[os.PathLike] = None,
           stage: Optional[str] = None) -> Path:
    """Write the stage result; returns the file written."""
    return record_summary(stage or STAGE, summarize(result), data=result.to_dict(),
                          provenance=provenance(result.comparison), directory=directory)
