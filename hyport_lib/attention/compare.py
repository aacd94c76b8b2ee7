"""Numerics comparison of every attention implementation on this host against float64:
the grid of :mod:`~hyport_lib.attention.cases` run through each of
:mod:`~hyport_lib.attention.implementations`, compared with
:func:`~hyport_lib.npu_attention.reference.attention_reference` of the very same
low-precision inputs; metrics and verdicts by :mod:`~hyport_lib.attention.metrics`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from hyport_lib.attention.cases import AttentionCase, CaseData, build_grid, make_case_data
from hyport_lib.attention.implementations import Implementation, available_implementations, eager_attention
from hyport_lib.attention.metrics import METRIC_COLUMNS, compute_metrics, decide
from hyport_lib.attention.params import DTYPES
from hyport_lib.results import Provenance


#: The columns every reader of the rows relies on (an older record's rows may lack some).
ROW_COLUMNS = ("case", "layout", "dtype", "mask", "backend", "source", "max_abs", "bound", "cosine",
               "finite", "verdict")


@dataclass
class BackendInfo:
    """An implementation as the grid ran it: its name, what it is and where it ran."""

    name: str
    source: str = ""
    device: str = "cpu"
    emulated: bool = False  # hyport's CPU emulation of the NPU operator


@dataclass
class ComparisonResult:
    """Rows of one grid run (one per case and implementation) and the implementations; NPU
    figures come from the emulation when no real NPU took part."""

    rows: list[dict]
    backends: list[BackendInfo]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    full: bool = False

    def frame(self):
        """One row per (case, backend); metric columns named as in :data:`METRIC_COLUMNS`,
        :data:`ROW_COLUMNS` always there."""
        import pandas as pd

        frame = pd.DataFrame([r for r in self.rows if isinstance(r, dict)])
        return frame.reindex(columns=[*frame.columns, *(c for c in ROW_COLUMNS if c not in frame.columns)])

    @property
    def cases(self) -> int:
        return int(self.frame()["case"].nunique())

    @property
    def emulated(self) -> bool:
        return not any(b.name == "npu" for b in self.backends)

    @property
    def counts(self) -> dict[str, int]:
        return {str(k): int(n) for k, n in self.frame()["verdict"].value_counts(sort=False).items()}


def error_ratio(frame):
    """Each row's ``max_abs / bound`` of :meth:`ComparisonResult.frame` (NaN where either is
    missing or the bound is 0)."""
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
    """Run the grid (``cases`` or :func:`build_grid` ``(full, dtypes)``) on every backend
    (None: :func:`available_implementations`, looked up at call time so a test can patch
    it). ``device``: where eager and sdpa run (the emulation always runs on the CPU); case
    ``i`` draws its inputs with ``seed + i``; ``progress(done, total)`` after each case."""
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


def provenance(result: ComparisonResult) -> Provenance:
    """The :class:`~hyport_lib.results.Provenance` of a comparison's NPU figures
    (emulated on the CPU when no NPU took part)."""
    return Provenance(device="npu" if not result.emulated else "cpu", emulated=result.emulated)
