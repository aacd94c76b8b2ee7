"""Error metrics of one attention output against float64, and the verdict they give.

The numerics policy of docs/npu_fusion_attention.md (last section). Verdict per row,
in order (the column ``rule`` says which decided):

1. non-finite values on rows that attend something -> FAIL;
2. flash-attn's rule: ``max|out - ref| <= 2 * max|out_eager - ref| + atol`` -> FAIL when
   broken. ``atol`` is the dtype's rounding noise at the output's magnitude: the larger
   of flash-attn's own estimate (``2 * max|(ref + 0.3 - 0.3) - ref|`` in the case dtype)
   and two units in the last place at ``max|ref|`` (:func:`ulp_atol`). Without the
   second, a kernel one float32 ulp away from an exact eager result at ``|v| = 4`` failed
   (seen on a GPU): an exact baseline leaves no room for the candidate's rounding;
3. cosine similarity > 0.99 (msprobe) -> FAIL when not;
4. rows that attend nothing must be 0 (flash-attn's rule, hyport's emulation) -> WARN.

Relative errors divide by ``max(|ref|, 1e-6)``; near-zero reference values make the
max relative error large, which is why it is reported and not used to decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hyport_lib.attention.cases import CaseData

REL_FLOOR = 1e-6
COSINE_MIN = 0.99
#: The metric columns of a comparison row (blank when a backend raised).
METRIC_COLUMNS = ("max_abs", "rmse", "max_rel", "rel_gt_1e-3", "rel_gt_5e-3", "cosine")


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

    def row(self) -> dict:
        """The metrics as columns of a comparison row."""
        return {"max_abs": self.max_abs, "eager_max_abs": self.eager_max_abs,
                "bound": self.bound, "rmse": self.rmse, "max_rel": self.max_rel,
                "rel_gt_1e-3": self.rel_gt_1e3, "rel_gt_5e-3": self.rel_gt_5e3,
                "cosine": self.cosine, "empty_rows": self.empty_rows,
                "empty_rows_out": self.empty_rows_out,
                # Said outright: written as JSON, an infinite max_abs becomes null.
                "finite": self.finite}


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten(), b.flatten()
    denom = float(a.norm() * b.norm())
    return float(a @ b) / denom if denom > 0 else (1.0 if float(a.norm()) == 0 else 0.0)


def _empty_rows_out(values: torch.Tensor) -> str:
    """What a backend left on the rows that attend nothing."""
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
    """All metrics of one output against the float64 reference (valid rows only)."""
    out = out.detach().to("cpu", torch.float64)
    eager_out = eager_out.detach().to("cpu", torch.float64)
    valid = data.valid_rows.expand(out.shape[:3])
    ref_v, out_v = data.ref[valid], out[valid]
    err = (out_v - ref_v).abs()
    finite = bool(torch.isfinite(out_v).all())
    eager_err = _max((eager_out[valid] - ref_v).abs())
    ref_low = ref_v.to(dtype)
    atol = max(2 * _max(((ref_low + 0.3 - 0.3) - ref_low).abs().double()),
               ulp_atol(_max(ref_v.abs()), dtype))
    rel = err / ref_v.abs().clamp_min(REL_FLOOR)
    n = max(err.numel(), 1)
    return Metrics(
        max_abs=_max(err) if finite else float("inf"), eager_max_abs=eager_err, atol=atol,
        bound=2 * eager_err + atol, cosine=_cosine(out_v, ref_v) if finite else float("nan"),
        max_rel=_max(rel) if finite else float("inf"),
        rel_gt_1e3=float((rel > 1e-3).sum()) / n, rel_gt_5e3=float((rel > 5e-3).sum()) / n,
        rmse=float(err.pow(2).mean().sqrt()) if err.numel() else 0.0, finite=finite,
        empty_rows=int(data.empty_rows.sum()),
        empty_rows_out=_empty_rows_out(out[data.empty_rows.expand(out.shape[:3])]))


def decide(m: Metrics, baseline: bool = False) -> tuple[str, str]:
    """(verdict, the rule that decided), in the order of the module docstring."""
    if not m.finite:
        return "FAIL", "non-finite output on rows that attend keys"
    if m.max_abs > m.bound:
        return "FAIL", (f"flash-attn rule: max err {m.max_abs:.2e} > 2×eager "
                        f"{m.eager_max_abs:.2e} + atol {m.atol:.1e}")
    if not m.cosine > COSINE_MIN:
        return "FAIL", f"cosine {m.cosine:.5f} ≤ {COSINE_MIN}"
    if m.empty_rows_out not in ("-", "0"):
        return "WARN", f"fully masked rows give {m.empty_rows_out} (flash-attn gives 0)"
    if baseline:
        return "PASS", "baseline (out_pt of flash-attn's rule)"
    return "PASS", (f"flash-attn rule: {m.max_abs:.2e} ≤ 2×{m.eager_max_abs:.2e} "
                    f"+ {m.atol:.1e}; cosine > {COSINE_MIN}")
