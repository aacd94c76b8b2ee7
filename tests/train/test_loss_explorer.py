"""The loss to explore: a Vega-Lite spec JupyterLab draws offline (hover, zoom, a smoothing
slider), with the static PNG for everything else."""

from __future__ import annotations

import base64
import json
import math

from hyport_lib.display import VEGA_LITE_MIME
from hyport_lib.results import Provenance
from hyport_lib.train.loss_explorer import DEFAULT_SMOOTHING, SMOOTHING, loss_bundle, loss_spec, show_loss_explorer
from hyport_lib.train.result import StepMetrics
from hyport_lib.train.show import ema

RECORDS = [StepMetrics(step=s, loss=loss, learning_rate=1e-4 * s, tokens_per_s_per_card=100.0 + s)
           for s, loss in zip(range(1, 7), [2.0, 1.5, math.nan, 1.2, 1.0, 0.9])]


def _rows(spec, smoothing):
    return [r for r in spec["data"]["values"] if r["smoothing"] == smoothing]


def test_the_raw_loss_and_every_smoothing_are_in_the_data():
    spec = loss_spec(RECORDS, "smoke · CPU (not an NPU measurement)")
    raw = _rows(spec, 0.0)
    assert [r["step"] for r in raw] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in raw] == [2.0, 1.5, None, 1.2, 1.0, 0.9]  # NaN: a gap, valid JSON
    json.dumps(spec, allow_nan=False)  # nothing a browser's JSON parser would refuse
    for smoothing in SMOOTHING[1:]:
        expected = ema([r["loss"] if r["loss"] is not None else math.nan for r in raw],
                       alpha=round(1 - smoothing, 2))
        got = [r["smoothed"] for r in _rows(spec, smoothing)]
        assert got == [None if math.isnan(e) else e for e in expected]
    assert raw[3]["learning_rate"] == 4e-4 and raw[3]["tokens_per_s_per_card"] == 104.0
    assert spec["title"] == "smoke · CPU (not an NPU measurement)"


def test_the_slider_zoom_and_tooltip_are_declared():
    spec = loss_spec(RECORDS)
    (slider,) = spec["params"]
    assert slider["name"] == "smoothing" and slider["value"] == DEFAULT_SMOOTHING
    assert slider["bind"]["input"] == "range" and slider["bind"]["max"] == SMOOTHING[-1]
    raw_layer, smooth_layer = spec["layer"]
    assert raw_layer["params"][0]["bind"] == "scales"  # drag and scroll zoom the axes
    assert "smoothing" in smooth_layer["transform"][0]["filter"]  # follows the slider
    assert {t["field"] for t in raw_layer["encoding"]["tooltip"]} >= {"step", "loss", "learning_rate"}


def test_the_bundle_carries_a_png_for_the_report():
    bundle = loss_bundle(RECORDS, "t")
    assert set(bundle) == {VEGA_LITE_MIME, "image/png", "text/plain"}
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")


def test_the_title_says_where_the_figures_come_from(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))

    class Result:
        metrics = RECORDS
        provenance = Provenance(device="cpu")

    show_loss_explorer(Result(), "smoke")
    assert shown[0][VEGA_LITE_MIME]["title"] == "smoke · CPU (not an NPU measurement)"


def test_the_slider_starts_on_the_curve_the_static_png_draws():
    import inspect

    from hyport_lib.train.show import ema

    assert round(1 - DEFAULT_SMOOTHING, 2) == inspect.signature(ema).parameters["alpha"].default


def test_the_loss_axis_fits_the_data_so_the_smoothing_shows():
    """6.71 -> 6.43 over 20 noisy steps: on an axis from 0 the line is flat and every smoothing
    looks alike; on the data's own range the default smoothing moves the line visibly."""
    losses = [6.71 - 0.014 * i + (0.05 if i % 2 else -0.05) for i in range(20)]
    spec = loss_spec([StepMetrics(step=i + 1, loss=loss) for i, loss in enumerate(losses)])
    for layer in spec["layer"]:
        assert layer["encoding"]["y"]["scale"]["zero"] is False  # both layers: one shared axis
    values = [r[k] for r in spec["data"]["values"] for k in ("loss", "smoothed") if r[k] is not None]
    span = max(values) - min(values)  # the axis' range, its padding aside
    smoothed = [r["smoothed"] for r in _rows(spec, DEFAULT_SMOOTHING)]
    moved = max(abs(a - b) for a, b in zip(losses, smoothed)) / span
    assert moved > 0.2, moved  # over a fifth of the plot's height (under 2% on an axis from 0)
    assert max(abs(a - b) for a, b in zip(losses, smoothed)) / max(values) < 0.02
