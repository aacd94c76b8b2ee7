"""Stage 01 in a notebook: its tables, the devices table's blanks, the re-probe widget."""

from __future__ import annotations

from hyport_lib import display as D
from hyport_lib.devices.probe import DeviceInfo, DeviceProcess
from hyport_lib.environment import show
from hyport_lib.devices.ascend_versions import CannFacts
from hyport_lib.environment.stage import EnvironmentReport
from hyport_lib.environment.show import checks_frame, devices_frame
from hyport_lib.results import Check

from .test_stage import _report


def test_frames():
    report = _report("PASS", "WARN")
    report.devices = [DeviceInfo(0, 0, 0, "910B3", "OK", 10, 100,
                                 processes=[DeviceProcess(7, "python", 5)])]
    report.device = "npu"
    df = checks_frame(report)
    assert list(df.columns) == ["name", "verdict", "reason"] and list(df.verdict) == ["PASS", "WARN"]
    dev = devices_frame(report)
    assert dev.loc[0, "status"] == "BUSY" and dev.loc[0, "processes"] == "pid 7 python 5 MB"


def test_widget_reprobes():
    from hyport_lib.environment.show import environment_widget, summary_html

    first, second = _report("PASS"), _report("PASS", "FAIL")
    calls = []
    widget = environment_widget(probe=lambda: calls.append(1) or second, report=first)
    assert "Environment: PASS" in widget.status.value
    widget.reprobe()
    assert calls == [1] and widget.status.value == summary_html(second)
    assert "1 FAIL" in widget.status.value


def test_the_devices_table_shows_a_dash_and_says_why(monkeypatch):
    import IPython.display

    report = EnvironmentReport(system={}, versions={}, cann=CannFacts(), env_vars={}, device="cpu",
                               devices=[DeviceInfo(0, None, None, "cpu worker 0", None, None, None)],
                               checks=[Check("backend", "PASS", "cpu")])
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    show.show_environment(report, system=False)
    devices = next(s for s in shown if hasattr(s, "data") and "chip" in getattr(s.data, "columns", []))
    assert "None" not in devices.to_html() and f">{D.MISSING}<" in devices.to_html()
    note = next(s.data for s in shown if isinstance(getattr(s, "data", None), str) and s.data.startswith(D.MISSING))
    assert "npu" in note and "the CPU backend has no cards" in note
    assert all(isinstance(s, D.FittedTable) for s in shown if hasattr(s, "to_html") and not isinstance(s.data, str))
