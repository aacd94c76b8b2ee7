"""Display helpers shared by the notebooks: verdict colouring and live, rate-limited output
(as transformers' ``NotebookProgressCallback``: one ``display_id`` handle; under papermill
the last update is what the saved notebook keeps).
"""

from __future__ import annotations

import io
import time
from typing import Any

#: Background colours per verdict / status, shared by every table in the workbook.
VERDICT_COLOURS = {
    "PASS": "#c8e6c9", "OK": "#c8e6c9",
    "WARN": "#fff3c4", "REFUSED": "#fff3c4", "SKIP": "#e0e0e0", "SKIPPED-BUSY": "#e0e0e0", "SKIPPED": "#e0e0e0",
    "FAIL": "#ffcdd2", "FAILED": "#ffcdd2", "TIMEOUT": "#ffcdd2", "ERROR": "#ffcdd2",
    "PENDING": "#eeeeee", "NOT RUN": "#eeeeee", "RUNNING": "#bbdefb", "INTERRUPTED": "#ffe0b2",
}


def verdict_colour(value: Any) -> str:
    colour = VERDICT_COLOURS.get(str(value).upper())
    return f"background-color: {colour}" if colour else ""


def style_verdicts(df, columns=("verdict", "status")):
    """pandas Styler with verdict/status cells coloured; other cells untouched."""
    present = [c for c in columns if c in df.columns]
    styler = df.style
    if present:
        styler = styler.map(verdict_colour, subset=present)
    return styler.hide(axis="index")


def figure_png(fig, dpi: int = 100):
    """Render a matplotlib figure to an IPython PNG image and close the figure."""
    import matplotlib.pyplot as plt
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")


class LiveDisplay:
    """One display handle, updated at most every ``min_interval_s`` seconds (``force``: the
    final state, always)."""

    def __init__(self, min_interval_s: float = 1.0):
        self.min_interval_s = min_interval_s
        self._handle = None
        self._last = 0.0

    def due(self) -> bool:
        """Would :meth:`update` refresh now (nothing shown yet, or the interval passed)?"""
        return self._handle is None or time.monotonic() - self._last >= self.min_interval_s

    def update(self, obj: Any, force: bool = False) -> bool:
        """Show ``obj``; returns True when the display was actually refreshed."""
        from IPython.display import display

        now = time.monotonic()
        if not force and self._handle is not None and now - self._last < self.min_interval_s:
            return False
        if self._handle is None:
            self._handle = display(obj, display_id=True)
        else:
            self._handle.update(obj)
        self._last = now
        return True

