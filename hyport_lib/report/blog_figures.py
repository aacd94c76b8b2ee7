"""The PNG figures beside the blog drafts, under ``<run>/figures/``.

* ``figures/loss.png``: stage 04's loss curve (``data.metrics``) drawn by
  :func:`hyport_lib.train.show.loss_figure`, titled with the figures' provenance;
* ``figures/attention.png``: stage 02's error heatmap drawn by
  :func:`hyport_lib.attention.show.heatmap_figure` from the recorded rows.

The drafts are rewritten after every stage, so a figure is drawn only when its stage has
recorded the data, and drawn again only when the result file is newer than the PNG:
most rewrites cost a ``stat``. A figure that cannot be drawn is left out and the reason
is returned for the caveats; it never stops the drafts.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.report.blog_data import StageView, as_list, find

FIGURES_DIR = "figures"


def draw_figures(run_dir: Path, views: list[StageView]) -> tuple[dict[str, str], list[str]]:
    """Draw what the recorded results allow.

    Returns:
        ``({name: path relative to the run folder}, [why a figure is missing])``.
    """
    figures: dict[str, str] = {}
    problems: list[str] = []
    for name, stage_name, make in (("loss", "train", _loss_figure),
                                   ("attention", "attention", _heatmap_figure)):
        view = find(views, stage_name)
        if view is None or not view.finished:
            continue
        try:
            path = _draw(run_dir, f"{name}.png", view, make)
        except Exception as exc:  # noqa: BLE001 — matplotlib or odd data: the drafts go on
            problems.append(f"{FIGURES_DIR}/{name}.png: {type(exc).__name__}: {exc}")
            continue
        if path is not None:
            figures[name] = f"{FIGURES_DIR}/{name}.png"
    return figures, problems


def _draw(run_dir: Path, filename: str, view: StageView, make: Callable) -> Optional[Path]:
    """The PNG, redrawn only when the stage's result file is newer; None when no data."""
    target = Path(run_dir) / FIGURES_DIR / filename
    source = Path(run_dir) / "results" / f"{view.stage}.json"
    if target.is_file() and source.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    fig = make(view)
    if fig is None:
        if target.is_file():
            target.unlink()  # an older figure no longer matches what was recorded
        return None
    _write_png(fig, target)
    return target


def _loss_figure(view: StageView):
    records = [r for r in as_list(view.data.get("metrics"))
               if isinstance(r, dict) and isinstance(r.get("step"), (int, float))]
    if not records:
        return None
    from hyport_lib.train.show import loss_figure

    total = (view.data.get("plan") or {}).get("config", {}).get("max_steps")
    return loss_figure(records, total if isinstance(total, int) else None,
                       title=str(view.provenance.get("label") or ""))


def _heatmap_figure(view: StageView):
    rows = [r for r in as_list(view.data.get("rows")) if isinstance(r, dict)]
    if not any(r.get("backend") in ("npu", "npu-emulated") and r.get("max_abs") is not None
               for r in rows):
        return None
    from hyport_lib.attention.compare import ComparisonResult
    from hyport_lib.attention.show import heatmap_figure

    provenance = view.provenance
    result = ComparisonResult(
        rows=rows, backends=as_list(view.data.get("backends")),
        device=str(provenance.get("device") or "cpu"), emulated=bool(provenance.get("emulated")),
        seconds=float(view.data.get("seconds") or 0.0),
        cases=len({r.get("case") for r in rows}), full=bool(view.data.get("full")),
        notes=[str(n) for n in as_list(view.data.get("notes"))])
    return heatmap_figure(result)


def _write_png(fig, target: Path) -> None:
    """Save ``fig`` as a PNG atomically (a reader never sees half an image) and close it."""
    buffer = io.BytesIO()  # the figures are bare matplotlib Figures: nothing to close
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # shared like the other report files, not mkstemp's 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(buffer.getvalue())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["FIGURES_DIR", "draw_figures"]
