"""An :class:`EnvironmentReport` in a notebook and in the report (its draft section is
``blog.md.j2`` beside this module): static HTML the report keeps, and a re-probe button for
JupyterLab (:func:`environment_widget`), which the report strips.
"""

from __future__ import annotations

import html
from typing import Callable, Optional

import pandas as pd

from hyport_lib.display import (MISSING, VERDICT_COLOURS, fit, styled,
                                verdict_label)
from hyport_lib.drafting.values import fmt_value
from hyport_lib.environment.multinode import node_rows
from hyport_lib.environment.stage import EnvironmentReport, container_facts, summarize
from hyport_lib.results import VERDICTS, StageRecord
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.utils.wording import counted

#: Variables worth showing even when unset, with their default (docs/ascend_field_notes.md).
NOTABLE_VARIABLES = {
    "ASCEND_RT_VISIBLE_DEVICES": "all cards; comma-separated, no spaces",
    "HCCL_CONNECT_TIMEOUT": "120 s (range 120-7200)",
    "HCCL_EXEC_TIMEOUT": "1836 s on CANN 8.x",
    "HCCL_IF_BASE_PORT": "60000",
    "HCCL_SOCKET_IFNAME": "auto",
    "ASCEND_LAUNCH_BLOCKING": "0 (1 = synchronous, slow)",
    "TASK_QUEUE_ENABLE": "1",
    "CPU_AFFINITY_CONF": "unset",
    "PYTORCH_NPU_ALLOC_CONF": "unset (expandable_segments:True against fragmentation)",
    "ASCEND_GLOBAL_LOG_LEVEL": "3 (error)",
    "ASCEND_SLOG_PRINT_TO_STDOUT": "0",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "1 (torch imports torch_npu itself)",
    "NPU_FA2_SPARSE_MODE": "unset",
}


def checks_frame(report: EnvironmentReport):
    return pd.DataFrame([to_mapping(c) for c in report.checks], columns=["name", "verdict", "reason"])


def devices_frame(report: EnvironmentReport):
    rows = []
    for d in report.devices:
        rows.append({
            "card": d.index, "npu": d.npu_id, "chip": d.chip_id, "name": d.name,
            "health": d.health,
            "memory used (MB)": d.used_mb, "memory total (MB)": d.total_mb,
            "memory kind": "HBM" if d.hbm_total_mb is not None else ("device" if d.total_mb else None),
            "processes": "; ".join(p.describe() for p in d.processes),
            "status": "BUSY" if d.processes else ("FREE" if report.device != "cpu" else "-"),
        })
    return pd.DataFrame(rows, columns=["card", "npu", "chip", "name", "health", "memory used (MB)",
                                       "memory total (MB)", "memory kind", "processes", "status"])


def versions_frame(report: EnvironmentReport):
    rows = [{"package": k, "version": v if v is not None else "not installed"}
            for k, v in report.versions.items()]
    for key in ("torch_cuda", "torch_hip", "torch_cann"):
        if report.build.get(key):
            rows.append({"package": key.replace("_", " "), "version": str(report.build[key])})
    rows.append({"package": "CANN", "version": report.cann.version or "not found"})
    rows.append({"package": "driver", "version": report.cann.driver_version or "not found"})
    return pd.DataFrame(rows, columns=["package", "version"])


def env_vars_frame(report: EnvironmentReport):
    """Set variables, then the notable ones unset with their defaults."""
    rows = [{"variable": k, "value": v, "note": NOTABLE_VARIABLES.get(k, "")}
            for k, v in report.env_vars.items()]
    rows += [{"variable": k, "value": "(unset)", "note": f"default: {note}"}
             for k, note in NOTABLE_VARIABLES.items() if k not in report.env_vars]
    return pd.DataFrame(rows, columns=["variable", "value", "note"])


def system_frame(report: EnvironmentReport):
    return pd.DataFrame([{"fact": k, "value": "" if v is None else str(v)}
                         for k, v in report.system.items()], columns=["fact", "value"])


def nodes_frame(report: EnvironmentReport):
    """This host's place in a job of several hosts: settings, rank table, peers, links, interfaces."""
    return pd.DataFrame([{"fact": k, "value": v} for k, v in node_rows(report.nodes)], columns=["fact", "value"])


def container_frame(report: EnvironmentReport):
    return pd.DataFrame([{"fact": k, "value": v} for k, v in container_facts(report.container)],
                        columns=["fact", "value"])


def summary_html(report: EnvironmentReport) -> str:
    verdict = summarize(report).verdict
    colour = VERDICT_COLOURS.get(verdict, "#ffffff")
    counts = report.summary()
    badges = " ".join(verdict_label(k, f"{counts[k]} {k}") for k in VERDICTS)
    return (f'<div style="padding:6px;border-left:6px solid {colour}">'
            f"<b>Environment: {verdict}</b> &nbsp; {badges} &nbsp; "
            f"backend <code>{html.escape(report.device)}</code>, {counted(report.num_cards, 'card')}, "
            f"collected in {report.elapsed_s:.2f} s</div>")


#: Device-table cells -> the verdict whose colour they take.
_DEVICE_CELL_VERDICT = {"FREE": "PASS", "BUSY": "WARN", "OK": "PASS", "WARNING": "WARN",
                        "ALARM": "FAIL", "CRITICAL": "FAIL"}


def _device_colour(value) -> str:
    verdict = _DEVICE_CELL_VERDICT.get(str(value).upper())
    return f"background-color: {VERDICT_COLOURS[verdict]}" if verdict else ""


def style_devices(df):
    return styled(df, colour=("health", "status"), cell_colour=_device_colour)


def devices_note(report: EnvironmentReport) -> str:
    """What the devices table's blanks mean."""
    frame = devices_frame(report)
    blank = [c for c in frame.columns if frame[c].isna().any()]
    if not blank:
        return ""
    why = ("the CPU backend has no cards, only worker processes" if report.device == "cpu"
           else f"not reported by {report.device_source}")
    return f"{MISSING} ({', '.join(blank)}): {why}."


def show_environment(report: EnvironmentReport, *, system: bool = True) -> None:
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
    if report.nodes is not None:
        display(Markdown(f"**Nodes** ({report.nodes.line or 'one host: no node setting'})"))
        display(fit(nodes_frame(report)))
    display(Markdown("**Environment variables** (names that look secret are never shown)"))
    display(fit(env_vars_frame(report)))
    if system:
        display(Markdown("**System**"))
        display(fit(system_frame(report)))


def environment_widget(probe: Callable[[], EnvironmentReport],
                       report: Optional[EnvironmentReport] = None):
    """A "Re-probe" button above the latest report (``report`` at first): display it after
    the static rendering, which stays for the HTML report (widgets are stripped)."""
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
    """The index card."""
    failing = [c.name for c in record.data.checks if c.verdict in ("FAIL", "WARN")]
    rows = [("verdict", fmt_value(record.verdict)), ("checks", fmt_value(record.figure("checks"))),
            ("device", f"{fmt_value(record.figure('device'))} × {fmt_value(record.figure('cards'))}")]
    memory = record.data.memory
    if memory is not None and memory.line:
        rows.append(("memory", memory.line))
        if memory.model is not None:
            rows.append((memory.model.model, memory.model.card_line or memory.model.host_line))
    nodes = record.data.nodes
    if nodes is not None and nodes.line:
        rows.append(("nodes", nodes.line))
    return rows + [("to look at", ", ".join(failing) or "nothing")]


def blog_facts(record: StageRecord[EnvironmentReport]) -> dict:
    """The backend the run used and the cards the next stages use, for the draft's title
    (none where the record does not say: a record without them must not claim the
    reader's defaults for the run); the job's hosts where stage 01 found several; the memory the stages plan with and the model's fit in
    it, where 01 planned one, as the index card says them (issue 41: the draft carries them)."""
    memory = record.data.memory
    planned = memory.model if memory is not None else None
    nodes = record.data.nodes
    return {"device": record.data.device or None, "cards": record.data.num_cards or None,
            "nodes": nodes.line or None if nodes is not None else None,
            "memory_capacity": memory.line if memory is not None and memory.line else None,
            "model_memory": [(planned.model, line) for line in planned.lines()] if planned is not None else None}
