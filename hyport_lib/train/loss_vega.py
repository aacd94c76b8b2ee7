"""The Vega-Lite parts of a loss plot that JupyterLab draws with the Vega renderer it ships
(nothing fetched): what the loss explorer and the compare view's overlay of runs share, and
that overlay's spec (the stage's ``show.compare`` hands it to the compare view)."""

from __future__ import annotations

from typing import Optional

import pandas as pd

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
#: The loss axis fits the data, not from 0 (a loss from 6.71 to 6.43 is no flat line, and the
#: smoothing shows), with a few pixels of room above and below the extremes.
LOSS_SCALE = {"zero": False, "nice": False, "padding": 12}
#: Drag to pan, wheel to zoom, double-click to reset: both axes.
ZOOM = {"name": "zoom", "select": "interval", "bind": "scales"}
#: Steps are whole: no tick at 2.5.
STEP = {"field": "step", "type": "quantitative", "title": "step", "axis": {"tickMinStep": 1, "format": "d"}}


def overlay_spec(losses: pd.DataFrame, title: str = "") -> Optional[dict]:
    """The losses of every run overlaid (``losses``: run, label, step, loss; the label names
    the run and where its figures came from), one colour and one legend entry per run, the
    step, loss and run on hover, zoom on the axes; None when no run logged a loss."""
    if losses.empty:
        return None
    rows = [{"run": label, "step": int(step), "loss": float(loss)}
            for label, step, loss in zip(losses["label"], losses["step"], losses["loss"])]
    return {
        "$schema": SCHEMA,
        "title": title or "loss per step",
        "width": 640, "height": 260,
        "data": {"values": rows},
        "mark": {"type": "line", "point": True},
        "params": [ZOOM],
        "encoding": {
            "x": STEP,
            "y": {"field": "loss", "type": "quantitative", "title": "loss", "scale": LOSS_SCALE},
            "color": {"field": "run", "type": "nominal", "sort": None, "title": "run",
                      "legend": {"orient": "bottom", "direction": "vertical", "labelLimit": 0}},
            "tooltip": [{"field": "run", "type": "nominal"}, {"field": "step", "type": "quantitative"},
                        {"field": "loss", "type": "quantitative", "format": ".4f"}],
        },
    }
