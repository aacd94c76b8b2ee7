"""The run at a glance: the few figures of each stage a reader looks for first.

Read from what each stage recorded (``results/NN_stage.json``), never recomputed:
environment verdict; attention cases passed / total and the worst case; inference cards
ok / total, consistency and warm tokens/s; training exit code, steps, first → last loss,
tokens/s/p, total time and a small loss curve; weights shards, tensors, parameters,
findings and LOAD_OK. A stage this module does not know shows its recorded headline.
The loss curve is an inline SVG: no script, no image file, nothing fetched.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Callable, Optional

Figures = list[tuple[str, str]]


def load_data(run_dir: Path, stage: str) -> dict:
    """``data`` and ``headline`` of a stage's result file (empty when it wrote none)."""
    try:
        raw = json.loads((Path(run_dir) / "results" / f"{stage}.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def fmt_value(value, digits: int = 4) -> str:
    """A recorded value on a card or in the stages table: ``—`` when not recorded (a
    failed run: never Python's ``None``), bools as yes / no, floats rounded to ``digits``
    significant digits below 1,000 and to one decimal with separators above
    (``12,345.7`` s, not ``1.235e+04``)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}" if math.isfinite(value) and abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def environment(result: dict) -> Figures:
    data, head = result.get("data") or {}, result.get("headline") or {}
    failing = [c["name"] for c in data.get("checks", []) if c.get("verdict") in ("FAIL", "WARN")]
    return [("verdict", fmt_value(result.get("verdict"))), ("checks", fmt_value(head.get("checks"))),
            ("device", f"{fmt_value(head.get('device'))} × {fmt_value(head.get('cards'))}"),
            ("to look at", ", ".join(failing) or "nothing")]


def attention(result: dict) -> Figures:
    """Cases (a case passes when every implementation passed it), then the worst one."""
    rows = [r for r in (result.get("data") or {}).get("rows") or [] if isinstance(r, dict)]
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(str(r.get("case")), []).append(r)
    passed = sum(1 for case in by_case.values() if all(r.get("verdict") == "PASS" for r in case))
    judged = [r for r in rows if r.get("bound") and r.get("max_abs") is not None]
    worst = max(judged, key=lambda r: r["max_abs"] / r["bound"], default=None)
    out = [("cases passed", f"{passed} / {len(by_case)} ({len(rows)} results)")]
    nonfinite = next((r for r in rows if r.get("finite") is False), None)
    if nonfinite:  # NaN / Inf in an output: worse than any finite error
        out.append(("worst case", f"{nonfinite.get('case')} on {nonfinite.get('backend')}: "
                                  f"non-finite output"))
    elif worst:
        out.append(("worst case", f"{worst.get('case')} on {worst.get('backend')}: error "
                                  f"{worst['max_abs'] / worst['bound']:.3g} of the bound"))
    model = (result.get("data") or {}).get("model") or {}
    if model:
        out.append(("model", f"{fmt_value(model.get('verdict'))}, max |Δ logits| "
                             f"{fmt_value(model.get('max_abs_logits'), 3)}"))
    return out


def inference(result: dict) -> Figures:
    head = result.get("headline") or {}
    consistent = head.get("consistent")
    return [("cards ok", fmt_value(head.get("cards ok"))),
            ("consistent", fmt_value(consistent) if consistent is not None else "—"),
            ("warm tokens/s (median)", fmt_value(head.get("tokens/s incl. prefill (median)"))),
            ("cold first call s (median)", fmt_value(head.get("cold first call s (median)")))]


def training(result: dict) -> Figures:
    head = result.get("headline") or {}
    return [("exit code", fmt_value(head.get("exit code"))), ("steps", fmt_value(head.get("steps"))),
            ("loss first → last", fmt_value(head.get("loss first → last"))),
            ("tokens/s/p", fmt_value(head.get("tokens/s/p"))), ("total s", fmt_value(head.get("total s")))]


def weights(result: dict) -> Figures:
    head, data = result.get("headline") or {}, result.get("data") or {}
    from hyport_lib.weights.defaults import checked_label

    out = [("checked", checked_label(str(data.get("source") or "")))]
    out += [(k, fmt_value(head.get(k))) for k in ("shards", "tensors", "parameters")]
    out.append(("findings", f"{fmt_value(head.get('errors'))} error(s), {fmt_value(head.get('warnings'))} warning(s)"))
    out.append(("LOAD_OK", fmt_value(head.get("LOAD_OK")) if "LOAD_OK" in head else "not reloaded"))
    if "tensors changed vs base" in head:
        out.append(("vs base", f"{fmt_value(head['tensors changed vs base'])} tensors changed"))
    if "checkpoint tensors identical" in head:
        out.append(("vs checkpoint", f"{fmt_value(head['checkpoint tensors identical'])} tensors identical"))
    return out


#: Stage name (the part after ``NN_``) -> its figures.
GLANCES: dict[str, Callable[[dict], Figures]] = {
    "environment": environment, "attention": attention, "inference": inference,
    "train": training, "weights": weights,
}


def figures(stage_id: str, result: dict) -> Figures:
    """The glance of ``stage_id`` (``04_train``) from its recorded result."""
    if not result:
        return []
    name = stage_id.partition("_")[2]
    try:
        return GLANCES.get(name, lambda r: [(k, fmt_value(v)) for k, v in (r.get("headline") or {}).items()])(result)
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:  # an odd record: say so
        return [("(figures unreadable)", f"{type(exc).__name__}: {exc}")]


def loss_svg(result: dict, width: int = 220, height: int = 60) -> str:
    """A small inline SVG of the training loss (empty when there is none)."""
    metrics = (result.get("data") or {}).get("metrics") or []
    points = [(m["step"], m["loss"]) for m in metrics
              if isinstance(m.get("loss"), (int, float)) and math.isfinite(m["loss"])]
    if len(points) < 2:
        return ""
    steps, losses = [p[0] for p in points], [p[1] for p in points]
    lo, hi = min(losses), max(losses)
    span, s0, s1 = (hi - lo) or 1.0, min(steps), max(steps)

    def xy(step, loss):
        x = 4 + (width - 8) * (step - s0) / ((s1 - s0) or 1)
        y = 4 + (height - 8) * (1 - (loss - lo) / span)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(s, v) for s, v in points)
    label = html.escape(f"loss {losses[0]:.4g} → {losses[-1]:.4g} over steps {s0}–{s1}")
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{label}"><title>{label}</title>'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line}"/></svg>')


def sources(run_dir: Path, stage_ids: list[str]) -> dict[str, list[str]]:
    """Provenance label -> the stages whose figures came from there."""
    by_label: dict[str, list[str]] = {}
    for stage in stage_ids:
        label = (load_data(run_dir, stage).get("provenance") or {}).get("label")
        if label:
            by_label.setdefault(label, []).append(stage.partition("_")[0])
    return by_label


def figure_rows(stage_id: str, result: dict) -> Optional[str]:
    """The glance as HTML ``<dl>`` rows (None when the stage recorded nothing)."""
    found = figures(stage_id, result)
    if not found:
        return None
    return "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in found)
