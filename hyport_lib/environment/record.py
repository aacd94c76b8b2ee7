"""Record stage 01's result for the report (one place for the notebook and the CLI)."""

from __future__ import annotations

from pathlib import Path

from hyport_lib.results import Provenance, record_result

STAGE = "01_environment"


def environment_summary(report) -> str:
    """``"5 PASS / 0 WARN / 0 FAIL / 10 SKIP on cpu; first WARN: dev_shm"``."""
    attention = [c for c in report.checks if c.verdict in ("FAIL", "WARN")]
    attention.sort(key=lambda c: c.verdict != "FAIL")  # a FAIL is named before a WARN
    first = f"; first {attention[0].verdict}: {attention[0].name}" if attention else ""
    return f"{report.summary_line()} on {report.device}{first}"


def record_environment(report, stage: str = STAGE) -> Path:
    """Write the environment report as the stage result; returns the file written."""
    return record_result(
        stage, report.verdict, summary=environment_summary(report),
        headline={"checks": report.summary_line(skip=False), "device": report.device,
                  "cards": report.num_cards},
        data=report.to_dict(), provenance=Provenance(device=report.device))
