"""Every attention implementation of this host against float64: the grid of
:mod:`~hyport_lib.attention.cases` run through each of
:mod:`~hyport_lib.attention.implementations`, compared with
:func:`~hyport_lib.npu_attention.reference.attention_reference` of the very same
low-precision inputs, and judged by the numerics policy of docs/npu_fusion_attention.md
(rules in its order; the column ``rule`` says which decided).

``atol`` is the larger of flash-attn's estimate and two units in the last place at
``max|ref|`` (:func:`ulp_atol`). Without the second, a kernel one float32 ulp away from an
exact eager result at ``|v| = 4`` failed (seen on a GPU): an exact baseline leaves no room
for the candidate's rounding. A non-finite eager output leaves a row no bound: it fails.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from hyport_lib.attention.cases import AttentionCase, CaseData, build_grid, make_case_data
from hyport_lib.attention.implementations import Implementation, available_implementations, eager_attention
from hyport_lib.attention.params import DTYPES
from hyport_lib.proof.tolerance import KERNEL_COSINE, OUTPUTS, TOLERANCE, compare
from hyport_lib.results import Provenance

REL_FLOOR = 1e-6
#: The metric columns of a comparison row (blank when a backend raised).
METRIC_COLUMNS = ("max_abs", "rmse", "max_rel", "rel_gt_1e-3", "rel_gt_5e-3", "cosine")
#: The columns every reader of the rows relies on (an older record's rows may lack some).
ROW_COLUMNS = ("case", "layout", "dtype", "mask", "backend", "source", "max_abs", "bound", "cosine",
               "finite", "verdict")


@dataclass
class Metrics:
    max_abs: float
    eager_max_abs: float
    atol: float
    bound: float
    cosine: float
    max_rel: float
    rel_gt_1e3: float
    rel_gt_5e3: float
    rmse: float
    finite: bool
    empty_rows: int
    empty_rows_out: str  # "0", "NaN" or "nonzero" (what the backend left there), "-" if none
    cosine_floor: float = TOLERANCE["float32"][KERNEL_COSINE]  # of the case's dtype

    def row(self) -> dict:
        return {"max_abs": self.max_abs, "eager_max_abs": self.eager_max_abs,
                "bound": self.bound, "rmse": self.rmse, "max_rel": self.max_rel,
                "rel_gt_1e-3": self.rel_gt_1e3, "rel_gt_5e-3": self.rel_gt_5e3,
                "cosine": self.cosine, "empty_rows": self.empty_rows,
                "empty_rows_out": self.empty_rows_out,
                # Said outright: written as JSON, an infinite max_abs becomes null.
                "finite": self.finite}


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def _empty_rows_out(values: torch.Tensor) -> str:
    if not values.numel():
        return "-"
    if torch.isnan(values).any():
        return "NaN"
    return "0" if bool((values == 0).all()) else "nonzero"


def ulp_atol(magnitude: float, dtype: torch.dtype, ulps: int = 2) -> float:
    """``ulps`` units in the last place of ``dtype`` at ``magnitude`` (0 for 0)."""
    if magnitude <= 0 or not math.isfinite(magnitude):
        return 0.0
    return ulps * torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(magnitude))


def compute_metrics(out: torch.Tensor, data: CaseData, eager_out: torch.Tensor,
                    dtype: torch.dtype) -> Metrics:
    """On the rows that attend something; max |Δ|, cosine and finiteness as every proof
    judges them (:func:`~hyport_lib.proof.tolerance.compare`)."""
    out = out.detach().to("cpu", torch.float64)
    valid = data.valid_rows.expand(out.shape[:3])
    ref_v, out_v = data.ref[valid], out[valid]
    judged = compare(OUTPUTS, ref_v, out_v)
    err = (out_v - ref_v).abs()
    eager_err = _max((eager_out.detach().to("cpu", torch.float64)[valid] - ref_v).abs())
    ref_low = ref_v.to(dtype)
    atol = max(2 * _max(((ref_low + 0.3 - 0.3) - ref_low).abs().double()),
               ulp_atol(_max(ref_v.abs()), dtype))
    rel = err / ref_v.abs().clamp_min(REL_FLOOR)
    n = max(err.numel(), 1)
    return Metrics(
        max_abs=judged.max_abs, eager_max_abs=eager_err, atol=atol, bound=2 * eager_err + atol,
        cosine=judged.cosine, max_rel=_max(rel) if judged.finite else float("inf"),
        rel_gt_1e3=float((rel > 1e-3).sum()) / n, rel_gt_5e3=float((rel > 5e-3).sum()) / n,
        rmse=float(err.pow(2).mean().sqrt()) if err.numel() else 0.0, finite=judged.finite,
        empty_rows=int(data.empty_rows.sum()),
        empty_rows_out=_empty_rows_out(out[data.empty_rows.expand(out.shape[:3])]),
        cosine_floor=TOLERANCE[str(dtype).removeprefix("torch.")][KERNEL_COSINE])


def decide(m: Metrics, baseline: bool = False) -> tuple[str, str]:
    """(verdict, the rule that decided), in the order of docs/npu_fusion_attention.md."""
    if not m.finite:
        return "FAIL", "non-finite output on rows that attend keys"
    if not math.isfinite(m.bound):  # NaN: every ``max_abs > bound`` would be false
        return "FAIL", f"flash-attn rule: no bound, eager's output is non-finite (max err {m.eager_max_abs})"
    if m.max_abs > m.bound:
        return "FAIL", (f"flash-attn rule: max err {m.max_abs:.2e} > 2×eager "
                        f"{m.eager_max_abs:.2e} + atol {m.atol:.1e}")
    if not m.cosine > m.cosine_floor:
        return "FAIL", f"cosine {m.cosine:.5f} ≤ {m.cosine_floor}"
    if m.empty_rows_out not in ("-", "0"):
        return "WARN", f"fully masked rows give {m.empty_rows_out} (flash-attn gives 0)"
    if baseline:
        return "PASS", "baseline (out_pt of flash-attn's rule)"
    return "PASS", (f"flash-attn rule: {m.max_abs:.2e} ≤ 2×{m.eager_max_abs:.2e} "
                    f"+ {m.atol:.1e}; cosine > {m.cosine_floor}")


@dataclass
class BackendInfo:
    """An implementation as the grid ran it."""

    name: str
    source: str = ""
    device: str = "cpu"
    emulated: bool = False  # hyport's CPU emulation of the NPU operator


@dataclass
class ComparisonResult:
    """Rows of one grid run (one per case and implementation) and the implementations."""

    rows: list[dict]
    backends: list[BackendInfo]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    full: bool = False

    def frame(self):
        """One row per (case, backend), :data:`ROW_COLUMNS` always there."""
        import pandas as pd

        frame = pd.DataFrame([r for r in self.rows if isinstance(r, dict)])
        return frame.reindex(columns=[*frame.columns, *(c for c in ROW_COLUMNS if c not in frame.columns)])

    @property
    def cases(self) -> int:
        return int(self.frame()["case"].nunique())

    @property
    def provenance(self) -> Provenance:
        emulated = not any(b.name == "npu" for b in self.backends)
        return Provenance(device="cpu" if emulated else "npu", emulated=emulated)

    @property
    def counts(self) -> dict[str, int]:
        return {str(k): int(n) for k, n in self.frame()["verdict"].value_counts(sort=False).items()}

    def npu_rows(self):
        """``(name, rows)``: the measured rows of the NPU kernel, else of its emulation."""
        frame = self.frame()
        measured = frame[frame["max_abs"].notna()]
        name = "npu" if (measured["backend"] == "npu").any() else "npu-emulated"
        return name, measured[measured["backend"] == name]


def error_ratio(frame):
    """Each row's ``max_abs / bound`` (NaN where either is missing or the bound is 0)."""
    import pandas as pd

    bound = pd.to_numeric(frame["bound"], errors="coerce")
    return pd.to_numeric(frame["max_abs"], errors="coerce") / bound.where(bound != 0)


def _error_row(case: AttentionCase, be: Implementation, exc: Exception, data: CaseData) -> dict:
    """A backend that raises on a valid case fails it (SKIP for a dtype it may lack)."""
    message = (str(exc).splitlines() or [""])[0][:160]
    optional = case.dtype in be.optional_dtypes
    return dict({c: None for c in METRIC_COLUMNS}, verdict="SKIP" if optional else "FAIL",
                rule=(f"{case.dtype} not supported here: " if optional else "error: ")
                + f"{type(exc).__name__}: {message}",
                empty_rows=int(data.empty_rows.sum()), empty_rows_out="-", ms=None)


def compare_case(case: AttentionCase, backends: Sequence[Implementation], seed: int = 0) -> list[dict]:
    """Rows of one case, one per backend that can express it."""
    data = make_case_data(case, seed)
    eager_out = eager_attention(data.q, data.k, data.v, data.keep, case.scale)
    rows = []
    for be in backends:
        row = {**case.describe(), "backend": be.name, "source": be.source}
        started = time.perf_counter()
        try:
            out = be.run(case, data, be.device)
        except Exception as exc:  # recorded as the row's verdict, not raised
            rows.append({**row, **_error_row(case, be, exc, data)})
            continue
        if out is None:
            continue
        ms = (time.perf_counter() - started) * 1e3
        m = compute_metrics(out, data, eager_out, case.torch_dtype)
        verdict, rule = decide(m, baseline=be.name == "eager")
        rows.append({**row, **m.row(), "verdict": verdict, "rule": rule, "ms": ms})
    return rows


def run_comparison(cases: Optional[Sequence[AttentionCase]] = None, device: str = "auto",
                   seed: int = 0, full: bool = False, dtypes: Sequence[str] = DTYPES,
                   backends: Optional[Sequence[Implementation]] = None,
                   flash_attn_version: Optional[str] = None,
                   progress: Optional[Callable[[int, int], None]] = None) -> ComparisonResult:
    """``cases`` (None: :func:`build_grid` ``(full, dtypes)``) on every backend (None:
    :func:`available_implementations`, looked up at call time so a test can patch it).
    ``device``: where eager and sdpa run (the emulation always runs on the CPU); case ``i``
    draws its inputs with ``seed + i``; ``progress(done, total)`` after each case."""
    cases = list(cases) if cases is not None else build_grid(full, dtypes)
    backends = list(backends) if backends is not None else available_implementations(
        device, flash_attn_version)
    started = time.perf_counter()
    rows: list[dict] = []
    for i, case in enumerate(cases):
        rows += compare_case(case, backends, seed + i)
        if progress is not None:
            progress(i + 1, len(cases))
    notes = []
    if not any(b.name == "npu" for b in backends):
        notes.append("No NPU here: NPU figures come from hyport's CPU emulation of "
                     "npu_fusion_attention (the documented contract), not from an NPU.")
    return ComparisonResult(
        rows=rows, backends=[BackendInfo(b.name, b.source, b.device, b.emulated) for b in backends],
        notes=notes, seconds=time.perf_counter() - started, full=full)
