"""The drafts' PNG figures, ``<run>/figures/<name>.png``, from each stage's
``show.blog_figures`` (:mod:`hyport_lib.drafting`). The drafts are rewritten after every
stage, so a figure is drawn once its stage finished and redrawn only when the result file
is newer. A figure that cannot be drawn is left out, its reason returned for the caveats.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.report.run import RESULTS_DIR, StageView
from hyport_lib.results import result_file
from hyport_lib.utils.files import atomic_write_bytes

FIGURES_DIR = "figures"


def draw_figures(run_dir: Path, views: list[StageView]) -> tuple[dict[str, str], list[str]]:
    """Draw what the recorded results allow: ``({name: path relative to the run folder},
    [why a figure is missing])``."""
    figures: dict[str, str] = {}
    problems: list[str] = []
    drawn_by: dict[str, str] = {}
    for view in views:
        named = view.hook("blog_figures")
        if named is None or not view.finished or view.record is None:
            continue
        try:
            makers = named(view.record)
        except Exception as exc:  # noqa: BLE001 — odd recorded data: the drafts go on
            problems.append(f"{view.stage}: {type(exc).__name__}: {exc}")
            continue
        for name, make in makers.items():
            relative = f"{FIGURES_DIR}/{name}.png"
            if name in drawn_by:  # a file name is one figure: the first stage keeps it
                problems.append(f"{relative}: {view.stage} draws it too; {drawn_by[name]}'s is kept")
                continue
            drawn_by[name] = view.stage
            try:
                path = _draw(Path(run_dir), relative, view.stage, make)
            except Exception as exc:  # noqa: BLE001 — matplotlib or odd data: the drafts go on
                problems.append(f"{relative}: {type(exc).__name__}: {exc}")
                continue
            if path is not None:
                figures[name] = relative
    return figures, problems


def _draw(run_dir: Path, relative: str, stage: str, make: Callable) -> Optional[Path]:
    """The PNG, redrawn only when the stage's result file is newer; None when no data."""
    target = run_dir / relative
    source = result_file(run_dir / RESULTS_DIR, stage)
    if target.is_file() and source.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    fig = make()
    if fig is None:
        if target.is_file():
            target.unlink()  # an older figure no longer matches what was recorded
        return None
    _write_png(fig, target)
    return target


def _write_png(fig, target: Path) -> None:
    """Save ``fig`` as a PNG atomically (a reader never sees half an image) and close it."""
    buffer = io.BytesIO()  # the figures are bare matplotlib Figures: nothing to close
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    atomic_write_bytes(target, buffer.getvalue())
