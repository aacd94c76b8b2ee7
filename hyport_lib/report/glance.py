"""The index's cards: each stage's recorded figures (``show.glance``, else its headline)
and inline SVG (``show.glance_svg``), never recomputed (see :mod:`hyport_lib.drafting`).
"""

from __future__ import annotations

import html
from typing import Optional

from hyport_lib.drafting.values import fmt_value
from hyport_lib.report.run import StageView
from hyport_lib.results import StageRecord

Figures = list[tuple[str, str]]


def headline_figures(record: StageRecord) -> Figures:
    """A stage's recorded headline as card figures: the generic card."""
    return [(k, fmt_value(v)) for k, v in record.headline.items()]


def card_figures(view: StageView) -> Figures:
    """The figures on a stage's card, from its recorded result (none when it wrote none)."""
    if view.record is None:
        return []
    glance = view.hook("glance") or headline_figures
    try:
        return glance(view.record)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:  # an odd record: say so
        return [("(figures unreadable)", f"{type(exc).__name__}: {exc}")]


def card_svg(view: StageView) -> str:
    """The stage's inline SVG under its figures ("" when it draws none)."""
    draw = view.hook("glance_svg")
    if view.record is None or draw is None:
        return ""
    try:
        return draw(view.record)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
        return f'<p class="prov">(figure unreadable: {html.escape(type(exc).__name__)})</p>'


def figure_rows(view: StageView) -> Optional[str]:
    """The card's figures as HTML ``<dl>`` rows (None when the stage recorded nothing)."""
    found = card_figures(view)
    if not found:
        return None
    return "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in found)


def sources(views: list[StageView]) -> dict[str, list[str]]:
    """Provenance label -> the numbers of the stages whose recorded figures came from there."""
    by_label: dict[str, list[str]] = {}
    for view in views:
        if view.record is not None and view.record.provenance is not None:
            by_label.setdefault(view.record.provenance.label, []).append(view.number)
    return by_label
