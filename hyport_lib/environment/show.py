"""An :class:`EnvironmentReport` in a notebook (:func:`show_environment`: static HTML the
report keeps; :func:`environment_widget`: a re-probe button for JupyterLab), and what the
report asks of the stage (:func:`glance`, :func:`blog_facts`; its draft section is
``blog.md.j2`` beside this module).
"""

from __future__ import annotations

import html
from typing import Callable, Optional

from hyport_lib.display import (MISSING, VERDICT_COLOURS, fit, styled,
                                verdict_label)
from hyport_lib.drafting.values import fmt_value
from hyport_lib.environment.collect import EnvironmentReport
from hyport_lib.environment.stage import summarize
from hyport_lib.results import VERDICTS, StageRecord
from hyport_lib.environment.frames import (checks_frame, container_frame, devices_frame,
                                           env_vars_frame, system_frame, versions_frame)

def summary_html(report: EnvironmentReport) -> str:
    """One coloured line: overall verdict and counts per verdict."""
    verdict = summarize(report).verdict
    colour = VERDICT_COLOURS.get(verdict, "#ffffff")
    counts = report.summary()
    badges = " ".join(verdict_label(k, f"{counts[k]} {k}") for k in VERDICTS)
    return (f'<div style="padding:6px;border-left:6px solid {colour}">'
            f"<b>Environment: {verdict}</b> &nbsp; {badges} &nbsp; "
            f"backend <code>{html.escape(report.device)}</code>, {report.num_cards} cards, "
            f"collected in {report.elapsed_s:.2f} s</div>")


#: Device-table cells -> the verdict whose colour they take.
_DEVICE_CELL_VERDICT = {"FREE": "PASS", "BUSY": "WARN", "OK": "PASS", "WARNING": "WARN",
                        "ALARM": "FAIL", "CRITICAL": "FAIL"}


def _device_colour(value) -> str:
    verdict = _DEVICE_CELL_VERDICT.get(str(value).upper())
    return f"background-color: {VERDICT_COLOURS[verdict]}" if verdict else ""


def style_devices(df):
    """Devices table with status (FREE/BUSY) and health coloured like verdicts."""
    return styled(df, colour=("health", "status"), cell_colour=_device_colour)


def devices_note(report: EnvironmentReport) -> str:
    """What the devices table's blanks mean: the figures its source does not report."""
    frame = devices_frame(report)
    blank = [c for c in frame.columns if frame[c].isna().any()]
    if not blank:
        return ""
    why = ("the CPU backend has no cards, only worker processes" if report.device == "cpu"
           else f"not reported by {report.device_source}")
    return f"{MISSING} ({', '.join(blank)}): {why}."


def show_environment(report: EnvironmentReport, *, system: bool = True) -> None:
    """Display the summary line, checks (coloured), devices, versions and variables."""
    from IPython.display import HTML, Markdown, display

    display(HTML(summary_html(report)))
    display(Markdown("**Checks**"))
    display(fit(styled(checks_frame(report), colour=("verdict", "status"))))
    display(Markdown(f"**Devices** (source: {report.device_source}"
                     + (f"; note: {report.device_error}" if report.device_error else "") + ")"))
    display(fit(style_devices(devices_frame(report))))
    note = devices_note(report)
    if note:
        display(Markdown(note))
    display(Markdown("**Versions**"))
    display(fit(versions_frame(report)))
    display(Markdown(f"**Container and driver** (read under `{report.container.root if report.container else '/'}`)"))
    display(fit(container_frame(report)))
    display(Markdown("**Environment variables** (names that look secret are never shown)"))
    display(fit(env_vars_frame(report)))
    if system:
        display(Markdown("**System**"))
        display(fit(system_frame(report)))


def environment_widget(probe: Callable[[], EnvironmentReport],
                       report: Optional[EnvironmentReport] = None):
    """A "Re-probe" button (calling ``probe`` for a fresh report) above an output area that
    shows the latest report, ``report`` at first. Returns the ipywidgets ``VBox``: display
    it after the static rendering, which stays for the HTML report (widgets are stripped)."""
    import ipywidgets as widgets

    button = widgets.Button(description="Re-probe", icon="refresh",
                            tooltip="collect the environment again and re-run the checks")
    status = widgets.HTML(value="")
    output = widgets.Output()

    def render(current: EnvironmentReport) -> None:
        output.clear_output(wait=True)
        with output:
            show_environment(current, system=False)
        status.value = summary_html(current)

    def on_click(_):
        button.disabled = True
        status.value = "probing..."
        try:
            render(probe())
        finally:
            button.disabled = False

    button.on_click(on_click)
    if report is not None:
        status.value = summary_html(report)
    box = widgets.VBox([widgets.HBox([button, status]), output])
    box.reprobe = lambda: on_click(button)  # what a click does, callable from code and tests
    box.status = status
    return box


# --------------------------------------------------------------------------- the report
def glance(record: StageRecord[EnvironmentReport]) -> list[tuple[str, str]]:
    """The index card: verdict, checks, device × cards, the checks to look at."""
    failing = [c.name for c in record.data.checks if c.verdict in ("FAIL", "WARN")]
    return [("verdict", fmt_value(record.verdict)), ("checks", fmt_value(record.figure("checks"))),
            ("device", f"{fmt_value(record.figure('device'))} × {fmt_value(record.figure('cards'))}"),
            ("to look at", ", ".join(failing) or "nothing")]


def blog_facts(record: StageRecord[EnvironmentReport]) -> dict:
    """The backend the run used and the cards the next stages use, for the draft's title
    (none where the record does not say: a record without them must not claim the
    reader's defaults for the run)."""
    return {"device": record.data.device or None, "cards": record.data.num_cards or None}
