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


def _fmt(value, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def environment(result: dict) -> Figures:
    data, head = result.get("data") or {}, result.get("headline") or {}
    failing = [c["name"] for c in data.get("checks", []) if c.get("verdict") in ("FAIL", "WARN")]
    return [("verdict", result.get("verdict", "?")), ("checks", head.get("checks", "?")),
            ("device", f"{head.get('device', '?')} × {head.get('cards', '?')}"),
            ("to look at", ", ".join(failing) or "nothing")]


def attention(result: dict) -> Figures:
    rows = (result.get("data") or {}).get("rows") or []
    passed = sum(1 for r in rows if r.get("verdict") == "PASS")
    judged = [r for r in rows if r.get("bound") and r.get("max_abs") is not None]
    worst = max(judged, key=lambda r: r["max_abs"] / r["bound"], default=None)
    out = [("rows passed", f"{passed} / {len(rows)}")]
    if worst:
        out.append(("worst case", f"{worst.get('backend')} {worst.get('layout')} {worst.get('dtype')} "
                                  f"{worst.get('mask')}: error {worst['max_abs'] / worst['bound']:.3g} of the bound"))
    model = (result.get("data") or {}).get("model") or {}
    if model:
        out.append(("model", f"{model.get('verdict')}, max |Δ logits| {_fmt(model.get('max_abs_logits'), 3)}"))
    return out


def inference(result: dict) -> Figures:
    head, data = result.get("headline") or {}, result.get("data") or {}
    return [("cards ok", str(head.get("cards ok", "?"))),
            ("consistent", "yes" if head.get("consistent") else "no"),
            ("warm tokens/s (median)", _fmt(head.get("tokens/s incl. prefill (median)"))),
            ("cold first call s (median)", _fmt(head.get("cold first call s (median)"))),
            ("consistency", str(data.get("consistency", "")))]


def training(result: dict) -> Figures:
    head = result.get("headline") or {}
    return [("exit code", str(head.get("exit code"))), ("steps", str(head.get("steps"))),
            ("loss first → last", str(head.get("loss first → last"))),
            ("tokens/s/p", _fmt(head.get("tokens/s/p"))), ("total s", _fmt(head.get("total s")))]


def weights(result: dict) -> Figures:
    head = result.get("headline") or {}
    return [(k, _fmt(v)) for k, v in head.items()]


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
        return GLANCES.get(name, lambda r: [(k, _fmt(v)) for k, v in (r.get("headline") or {}).items()])(result)
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
