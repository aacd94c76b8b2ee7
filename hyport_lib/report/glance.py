"""The index's cards: each stage's recorded figures (``show.glance``, else its headline)
and inline SVG (``show.glance_svg``), never recomputed (see :mod:`hyport_lib.drafting`).
"""

from __future__ import annotations

import html
from typing import Optional

from hyport_lib.drafting.values import as_dict, fmt_value
from hyport_lib.report.records import StageView

Figures = list[tuple[str, str]]


def headline_figures(record: dict) -> Figures:
    """A stage's recorded headline as card figures: the generic card."""
    return [(k, fmt_value(v)) for k, v in as_dict(record.get("headline")).items()]


def card_figures(view: StageView) -> Figures:
    """The figures on a stage's card, from its recorded result (none when it wrote none)."""
    if not view.result:
        return []
    glance = view.hook("glance") or headline_figures
    try:
        return glance(view.result)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:  # an odd record: say so
        return [("(figures unreadable)", f"{type(exc).__name__}: {exc}")]


def card_svg(view: StageView) -> str:
    """The stage's inline SVG under its figures ("" when it draws none)."""
    draw = view.hook("glance_svg")
    if not view.result or draw is None:
        return ""
    try:
        return draw(view.result)
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
        label = as_dict(as_dict(view.result).get("provenance")).get("label")
        if label:
            by_label.setdefault(label, []).append(view.number)
    return by_label
