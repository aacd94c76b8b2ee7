"""Stage 02's results as tables and the error heatmap in a notebook, its record in the
report (the draft section is ``blog.md.j2`` beside this module) and the comparison of runs.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Optional

from hyport_lib.attention.compare import error_ratio
from hyport_lib.attention.stage import GRID_STEP, AttentionStageResult, CaseProgress, summarize
from hyport_lib.attention.views import (backend_rows, behaviour_frame, behaviour_glance_row,
                                        behaviour_markdown, behaviour_values, case_tally, pairs_frame,
                                        port_glance_rows, port_kinds, proof_frame, proof_markdown)
from hyport_lib.display import MISSING, LiveDisplay, diff_html, figure_png, fit, styled
from hyport_lib.drafting.values import fmt_value, is_number
from hyport_lib.results import StageRecord, StageSummary
from hyport_lib.scan.hits import ScanReport
from hyport_lib.scan.show import group_hits, pins
from hyport_lib.workbook.compare import Part, RunRecord, StageComparison, presence
from hyport_lib.utils.wording import counted

TABLE_COLUMNS = ("case", "backend", "source", "max_abs", "bound", "cosine", "max_rel",
                 "rel_gt_1e-3", "rel_gt_5e-3", "rmse", "empty_rows", "empty_rows_out",
                 "verdict", "rule")
#: How the figures of the comparison table read (a missing one: :data:`MISSING`).
TABLE_FORMATS = {**dict.fromkeys(("max_abs", "bound", "max_rel", "rmse"), "{:.2e}"),
                 **dict.fromkeys(("rel_gt_1e-3", "rel_gt_5e-3"), "{:.1%}"), "cosine": "{:.6f}"}
#: Heatmap columns: (label, frame column, transform). Errors on a log10 scale.
HEATMAP_METRICS = (
    ("log10 max abs", "max_abs", "log"),
    ("log10 RMSE", "rmse", "log"),
    ("log10 max rel", "max_rel", "log"),
    ("share rel > 1e-3", "rel_gt_1e-3", "share"),
    ("share rel > 5e-3", "rel_gt_5e-3", "share"),
    ("1 - cosine (log10)", "cosine", "cos"),
    ("err / bound", "ratio", "ratio"),
)


def step_line(progress: CaseProgress) -> str:
    if progress.step == GRID_STEP:
        return f"grid: {progress.done}/{progress.total} cases"
    return f"grid: {progress.total} cases done; {progress.step} …"


def live_step_display(min_interval_s: float = 0.5) -> Callable[[CaseProgress], None]:
    """``on_progress`` for notebook 02: the stage's half minute never looks stalled."""
    from IPython.display import Markdown

    line = LiveDisplay(min_interval_s)

    def update(progress: CaseProgress) -> None:
        line.update(Markdown(f"`{step_line(progress)}`"),
                    force=progress.step != GRID_STEP or progress.done == progress.total)

    return update


def comparison_table(result):
    df = result.frame()
    return df[[c for c in TABLE_COLUMNS if c in df.columns]]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value, spec: str = "{}") -> str:
    return MISSING if _missing(value) else spec.format(value)


def styled_comparison(result):
    df = comparison_table(result)
    return styled(df, colour=("verdict", "status")).format(
        {c: f for c, f in TABLE_FORMATS.items() if c in df.columns}, na_rep=MISSING)


def provenance_note(result) -> str:
    """Where the NPU figures come from, in one paragraph."""
    backends = ", ".join(b.source for b in result.backends)
    text = (f"**Provenance:** {result.provenance.label}. Backends: {backends}. "
            f"{result.cases} cases in {result.seconds:.1f} s.")
    return text + "".join(f" {note}" for note in result.notes)


def _heatmap_cell(kind: str, raw: float) -> tuple[float, str]:
    """The value a cell is coloured by, and its text."""
    if kind == "log":
        return (math.log10(max(raw, 1e-12)) if not math.isnan(raw) else raw), f"{raw:.1e}"
    if kind == "cos":
        gap = 1.0 - raw
        return (math.log10(max(gap, 1e-12)) if not math.isnan(gap) else gap), f"{gap:.1e}"
    return raw, f"{100 * raw:.0f}%" if kind == "share" else f"{raw:.2f}"


def _heatmap_values(df):
    import numpy as np

    cells = [[_heatmap_cell(kind, float("nan") if _missing(row.get(col)) else float(row.get(col)))
              for _, col, kind in HEATMAP_METRICS] for _, row in df.assign(ratio=error_ratio(df)).iterrows()]
    return np.array([[v for v, _ in r] for r in cells], dtype=float), [[t for _, t in r] for r in cells]


def rows_heatmap(df, backend: Optional[str] = None):
    """Cases x metrics of one backend (default: the real NPU, else its emulation), each
    column coloured on its own scale, cells carrying the raw value; the title names the
    source, so that an emulated figure is never read as an NPU one."""
    import numpy as np
    # A bare Figure, not pyplot: no backend switch and no figure left open in a kernel.
    from matplotlib.figure import Figure

    df = df[df["max_abs"].notna()] if "max_abs" in df.columns else df
    names = set(df["backend"]) if len(df) else set()
    backend = backend or ("npu" if "npu" in names else "npu-emulated")
    sub = df[df["backend"] == backend]
    if sub.empty:
        raise ValueError(f"backend={backend!r}: no rows (have: {sorted(names)})")
    values, notes = _heatmap_values(sub)
    norm = np.full_like(values, np.nan)
    for j in range(values.shape[1]):
        col = values[:, j]
        ok = ~np.isnan(col)
        if ok.any():
            lo, hi = np.nanmin(col), np.nanmax(col)
            norm[:, j] = (col - lo) / (hi - lo) if hi > lo else 0.0  # constant: no contrast
    height = max(3.0, 0.28 * len(sub) + 1.5)
    fig = Figure(figsize=(11, height))
    ax = fig.subplots()
    ax.imshow(np.ma.masked_invalid(norm), aspect="auto", cmap="magma_r", vmin=0, vmax=1)
    ax.set_xticks(range(len(HEATMAP_METRICS)))
    ax.set_xticklabels([m[0] for m in HEATMAP_METRICS], rotation=30, ha="right", fontsize=8)
    # The labels above the cells as well: 45 rows put the bottom ones a screen away.
    ax.tick_params(axis="x", top=True, labeltop=True)
    for tick in ax.xaxis.get_major_ticks():
        tick.label2.set(rotation=30, ha="left", fontsize=8)
    ax.set_yticks(range(len(sub)))
    ax.set_yticklabels(list(sub["case"]), fontsize=7)
    for i, row in enumerate(notes):
        for j, text in enumerate(row):
            colour = "white" if (not np.isnan(norm[i, j]) and norm[i, j] > 0.6) else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color=colour)
    source = sub["source"].iloc[0]
    tag = "" if backend == "npu" else " — emulated, not an NPU measurement"
    ax.set_title(f"Error vs float64 reference: {source}{tag}\n"
                 "(each column on its own scale; darker = larger)", fontsize=9)
    fig.tight_layout()
    return fig


def model_table(model):
    import pandas as pd

    keys = ("model_path", "source", "attn_implementation", "dtype", "max_abs_logits",
            "top1_agreement", "kl_divergence", "greedy_identical", "new_tokens", "positions",
            "packed_tokens", "sliding_window", "packed_max_abs_logits",
            "swapped_calls", "trust_remote_code", "model_class", "verdict", "detail")
    return pd.DataFrame([{k: getattr(model, k) for k in keys}])


# --- notebook display -------------------------------------------------------------------
def _display(obj):
    from IPython.display import display

    display(obj)


def _markdown(text: str):
    from IPython.display import Markdown

    _display(Markdown(text))


def _html(text: str):
    from IPython.display import HTML

    return HTML(text)


def backend_summary(result):
    """One row per backend × dtype: verdict counts, worst error/bound and cosine."""
    import pandas as pd

    rows = pd.DataFrame(backend_rows(result.frame(), ("backend", "source", "dtype")))
    return rows.rename(columns={"rows": "cases", "ratio": "worst err/bound"}).reindex(columns=[
        "backend", "source", "dtype", "cases", "PASS", "WARN", "FAIL", "worst err/bound", "min cosine", "verdict"])


def show_comparison(result):
    """Every row (hundreds with ``full=True``) folded in a ``<details>`` block that travels
    with the HTML report, below the per-backend summary and the failing rows."""
    _markdown(provenance_note(result))
    summary = styled(backend_summary(result), colour=("verdict", "status")).format(
        {"worst err/bound": "{:.3f}", "min cosine": "{:.6f}"}, na_rep=MISSING)
    _display(fit(summary))
    table = comparison_table(result)
    bad = table[table["verdict"].isin(["FAIL", "WARN"])]
    if len(bad):
        _markdown(f"**{counted(len(bad), 'row')} not passing:**")
        _display(fit(styled_comparison(result).hide(table.index[~table["verdict"].isin(["FAIL", "WARN"])])))
    rows = fit(styled_comparison(result)).to_html()
    _display(_html(f"<details><summary>All {len(table)} rows (case × backend)</summary>{rows}</details>"))


def show_heatmap(result, backend: Optional[str] = None):
    """A static PNG: the HTML report keeps it."""
    _display(figure_png(rows_heatmap(result.frame(), backend)))


#: How the model table's figures read (other fields: as text).
_MODEL_FORMATS = {"max_abs_logits": "{:.2e}", "kl_divergence": "{:.2e}", "top1_agreement": "{:.1%}"}


def styled_model(model):
    """One field per row (its 18 fields side by side were twice as wide as a JupyterLab
    pane), the verdict coloured."""
    import pandas as pd

    row = model_table(model).iloc[0]
    frame = pd.DataFrame([(k, _text(v, _MODEL_FORMATS.get(k, "{}"))) for k, v in row.items()],
                         columns=["field", "value"])
    return styled(frame, colour=("value",))


def show_model_comparison(model):
    if model is None:
        _markdown("The model-level check was skipped (`model_path` is `none`).")
        return
    _display(fit(styled_model(model)))
    _markdown(behaviour_markdown(model.behaviour))
    if model.behaviour is not None and model.behaviour.meaningful:
        _display(fit(behaviour_frame(model.behaviour)))
        _display(fit(pairs_frame(model.behaviour)))


def show_port(port, error: str = "") -> None:
    if error:
        _markdown(f"**The port was not made**: {error}")
        return
    if port is None:
        _markdown("No port: `code_path` is empty (the scan read the planted example) or "
                  "`port` is off.")
        return
    _markdown(f"Ported `{port.src}` → `{port.dst}`: {counted(len(port.changes), 'change')} in "
              f"{counted(len(port.files_changed), 'file')}, {counted(len(port.manual), 'spot')} left for a human; "
              f"the diff is `{port.dst}/port.diff`, the record `{port.dst}/port.json`.")
    code = {"font-family": "monospace", "white-space": "pre-wrap", "text-align": "left"}
    _display(fit(styled(port.frame()).set_properties(subset=["before", "after"], **code)))  # code in its own lines
    if port.diff:
        _display(_html(f"<details open><summary>The changes side by side ({counted(len(port.files_changed), 'file')})"
                       f"</summary>{diff_html(port.diff)}</details>"))
    if not port.changes:
        _markdown("Nothing was rewritten: there is no port to prove.")
    elif port.proof is not None:
        _markdown(proof_markdown(port.proof))
        _display(fit(styled(proof_frame(port.proof), colour=("verdict", "status"))))


def summary_markdown(summary: StageSummary, result=None) -> str:
    lines = [f"**{summary.verdict}** — {summary.summary}", ""]
    lines += [f"- {k}: {v}" for k, v in summary.headline.items()]
    if result is not None:
        lines.append(f"- provenance: {result.provenance.label}")
    return "\n".join(lines)


def show_summary(result: AttentionStageResult):
    _markdown(summary_markdown(summarize(result), result))


# --------------------------------------------------------------------------- the report
def glance(record: StageRecord[AttentionStageResult]) -> list[tuple[str, str]]:
    result = record.data
    frame = result.frame()
    passed, cases, worst = case_tally(frame)
    out = [("cases passed", f"{passed} / {cases} ({len(frame)} results)")]
    nonfinite = frame[frame["finite"].eq(False)]
    if len(nonfinite):  # NaN / Inf in an output: worse than any finite error
        first = nonfinite.iloc[0]
        out.append(("worst case", f"{first['case']} on {first['backend']}: non-finite output"))
    elif worst:
        out.append(("worst case", f"{worst['case']} on {worst['backend']}: error "
                                  f"{worst['max_abs'] / worst['bound']:.3g} of the bound"))
    model = result.model
    if model is not None:
        out.append(("model", f"{fmt_value(model.verdict)}, max |Δ logits| "
                             f"{fmt_value(model.max_abs_logits, 3)}"))
        out += behaviour_glance_row(model.behaviour)
    return out + port_glance_rows(result)


def blog_notes(record: StageRecord[AttentionStageResult]) -> list[str]:
    """What was emulated, what was left out."""
    return [n for n in record.data.notes if n]


def blog_figures(record: StageRecord[AttentionStageResult]) -> dict[str, Callable]:
    """The error heatmap of the NPU rows (None when none was measured)."""
    return {"attention": lambda: _recorded_heatmap(record.data)}


def _recorded_heatmap(result: AttentionStageResult):
    name, rows = result.npu_rows()
    return rows_heatmap(rows, name) if len(rows) else None


def blog_values(record: StageRecord[AttentionStageResult]) -> dict:
    data = record.data
    scan = data.scan or ScanReport("")
    worst = next((v for k, v in record.headline.items() if str(k).startswith("worst ") and is_number(v)), None)
    backends = backend_rows(data.frame())
    return {"scan_hits": len(scan.hits), "scan_groups": group_hits(scan.hits), "worst": worst,
            "pins": pins(scan, data.flash_attn_version),
            "implementations": backends, "skips": any(b["SKIP"] for b in backends),
            "port_kinds": port_kinds(data.port),
            "behaviour": behaviour_values(data.model.behaviour if data.model is not None else None)}


# --------------------------------------------------------------------------- compare
_CASE_KEYS = ("case", "layout", "dtype", "mask", "backend")
#: hyport's CPU emulation of npu_fusion_attention in a backend's name: ``npu-emulated``,
#: ``flash-api (npu-emulated)``; the same name with ``npu`` is the same contract on an NPU.
_EMULATED, _ON_NPU = "npu-emulated", "npu"


def _cases_by_run(runs: list[RunRecord]) -> dict[str, dict[tuple, tuple[Any, str]]]:
    """Each run's rows: case key -> (verdict, what computed it). An emulated backend is
    matched with its NPU counterpart where no run recorded both (the CPU emulation run beside
    an NPU run): the same cases, computed by the emulation in one run, the NPU in the other."""
    frames = {r.run.id: r.record.data.frame() for r in runs}
    recorded = [set(frame["backend"].dropna()) for frame in frames.values()]
    every = set().union(*recorded) if recorded else set()
    counterpart = {b: b.replace(_EMULATED, _ON_NPU) for b in every if isinstance(b, str) and _EMULATED in b}
    matched = {b: npu for b, npu in counterpart.items()
               if npu in every and not any({b, npu} <= backends for backends in recorded)}
    found = {}
    for run_id, frame in frames.items():
        frame = frame.astype(object).where(frame.notna(), None)
        found[run_id] = {(*(row[k] for k in _CASE_KEYS[:-1]), matched.get(row["backend"], row["backend"])):
                         (row["verdict"], str(row["source"] or row["backend"])) for _, row in frame.iterrows()}
    return found


def compare(runs: list[RunRecord]) -> StageComparison:
    """The cases whose verdict is not the same in the runs that have the backend, with what
    computed it in each run; apart, the cases only some runs have (``only in A (…)``) and the
    backends that not every run has (the NPU kernel in an
    NPU run beside a CPU one): not a difference of verdicts, a backend the other could not run."""
    import pandas as pd

    cases = _cases_by_run(runs)
    backends = {run_id: {k[-1] for k in found} for run_id, found in cases.items()}
    shared = set.intersection(*backends.values()) if backends else set()
    by_id = {r.run.id: r.run for r in runs}
    rows, only, compared = [], [], 0
    for key in dict.fromkeys(k for found in cases.values() for k in found if k[-1] in shared):
        seen = {run_id: found[key] for run_id, found in cases.items() if key in found}
        compared += len(seen) == len(cases)
        if len(seen) < len(cases):  # a case the other run did not run: not a difference
            only.append({**dict(zip(_CASE_KEYS, key)), "in": presence([by_id[i] for i in seen], list(by_id.values())),
                         "verdict": ", ".join(str(verdict) for verdict, _ in seen.values()),
                         "source": ", ".join(source for _, source in seen.values())})
        elif len({verdict for verdict, _ in seen.values()}) > 1:
            rows.append({**dict(zip(_CASE_KEYS, key)),
                         **{col: value for i, (verdict, source) in seen.items()
                            for col, value in ((i, verdict), (f"{i} source", source))}})
    columns = [*_CASE_KEYS, *[col for i in cases for col in (i, f"{i} source")]]
    differs = pd.DataFrame(rows, columns=columns)
    rows = []
    for run_id, found in cases.items():
        for backend in sorted(b for b in backends[run_id] if not all(b in other for other in backends.values())):
            mine = [value for k, value in found.items() if k[-1] == backend]
            counts = Counter(str(verdict) for verdict, _ in mine)
            rows.append({"run": run_id, "backend": backend,
                         "source": ", ".join(sorted({source for _, source in mine})), "cases": len(mine),
                         "verdicts": ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))})
    unshared = pd.DataFrame(rows, columns=["run", "backend", "source", "cases", "verdicts"])
    every = "both" if len(cases) == 2 else f"all {len(cases)} runs"
    parts = [Part("attention", "02 attention: cases whose verdict differs (source: what computed it in each run)",
                  differs, empty=f"no case's verdict differs ({counted(compared, 'case')} in {every})")]
    if only:
        parts.append(Part("attention_only", "02 attention: cases only some runs have (not differences)",
                          pd.DataFrame(only, columns=[*_CASE_KEYS, "in", "verdict", "source"])))
    if not unshared.empty:
        parts.append(Part("attention_unshared", "02 attention: backends not every run has (not differences)",
                          unshared))
    return StageComparison(parts)
