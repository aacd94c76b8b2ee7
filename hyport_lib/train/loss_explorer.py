"""The loss to explore in JupyterLab (hover, zoom, a smoothing slider), as a Vega-Lite spec
JupyterLab renders with the Vega extension it ships: nothing to install and nothing fetched,
and a saved notebook keeps the spec and draws it again when opened. Where no Vega renderer
exists (nbconvert's HTML, the report, papermill), the static PNG of the same output is shown.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Optional

from hyport_lib.display import VEGA_LITE_MIME, figure_png
from hyport_lib.train.result import StepMetrics, TrainResult, finite
from hyport_lib.train.loss_vega import LOSS_SCALE, SCHEMA, STEP, ZOOM
from hyport_lib.train.show import ema, loss_figure
from hyport_lib.utils.wording import counted

#: The slider's positions: 0 is the raw loss; s smooths as TensorBoard does (EMA, α = 1 − s).
SMOOTHING = tuple(round(0.1 * i, 1) for i in range(10))
#: Where the slider starts: the static PNG's EMA (α = 0.3), so both first show one curve.
DEFAULT_SMOOTHING = 0.7


def _number(value: Any) -> Optional[float]:
    """A JSON-safe number: a non-finite loss is a gap in the line, not a point."""
    return float(value) if finite(value) else None


def loss_spec(records: list[StepMetrics], title: str = "") -> dict:
    """The Vega-Lite spec of the loss by step: the raw loss (points, with the step's learning
    rate and tokens/s in the tooltip), its smoothing chosen on a slider, zoom on the axes."""
    steps = [r.step for r in records]
    losses = [r.loss if finite(r.loss) else math.nan for r in records]
    rows = []
    for smoothing in SMOOTHING:
        smoothed = losses if smoothing == 0 else ema(losses, alpha=round(1 - smoothing, 2))
        for step, record, loss, smooth in zip(steps, records, losses, smoothed):
            rows.append({"step": step, "smoothing": smoothing, "loss": _number(loss),
                         "smoothed": _number(smooth), "learning_rate": _number(record.learning_rate),
                         "tokens_per_s_per_card": _number(record.tokens_per_s_per_card)})
    tooltip = [{"field": "step", "type": "quantitative"},
               {"field": "loss", "type": "quantitative", "format": ".4f"},
               {"field": "smoothed", "type": "quantitative", "format": ".4f"},
               {"field": "learning_rate", "type": "quantitative", "format": ".2e"},
               {"field": "tokens_per_s_per_card", "type": "quantitative", "format": ",.0f"}]
    return {
        "$schema": SCHEMA,
        "title": title or "loss",
        "width": 640, "height": 260,
        "data": {"values": rows},
        "params": [{"name": "smoothing", "value": DEFAULT_SMOOTHING,
                    "bind": {"input": "range", "min": SMOOTHING[0], "max": SMOOTHING[-1], "step": 0.1,
                             "name": "smoothing "}}],
        "layer": [
            {"transform": [{"filter": "datum.smoothing == 0"}],
             "mark": {"type": "line", "point": True, "opacity": 0.4, "color": "#1f77b4"},
             "params": [ZOOM],
             "encoding": {"x": STEP, "y": {"field": "loss", "type": "quantitative", "title": "loss",
                                           "scale": LOSS_SCALE},
                          "tooltip": tooltip}},
            {"transform": [{"filter": "abs(datum.smoothing - smoothing) < 0.001"}],
             "mark": {"type": "line", "color": "#d62728"},
             "encoding": {"x": STEP, "y": {"field": "smoothed", "type": "quantitative", "scale": LOSS_SCALE},
                          "tooltip": tooltip}},
        ],
    }


def loss_bundle(records: list[StepMetrics], title: str = "") -> dict:
    """The output's formats: the spec for JupyterLab, the PNG for everything else."""
    png = figure_png(loss_figure(records, None, title)).data
    return {VEGA_LITE_MIME: loss_spec(records, title),
            "image/png": base64.b64encode(png).decode("ascii"),
            "text/plain": f"<loss of {counted(len(records), 'step')}: hover, zoom and smooth in JupyterLab>"}


def show_loss_explorer(result: TrainResult, run_name: str = "") -> None:
    """Display :func:`loss_bundle` of the run's steps, titled with where its figures come
    from (a CPU run says so); a line when no step was logged."""
    from IPython.display import Markdown, display

    if not result.metrics:
        display(Markdown("No step was logged: no loss to explore."))
        return
    label = result.provenance.label if result.provenance else ""
    display(loss_bundle(result.metrics, " · ".join(t for t in (run_name, label) if t)), raw=True)
