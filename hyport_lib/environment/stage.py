"""Stage 01: the environment check — the stage id, the stage function and its record.

The notebook and ``hyport env`` both call :func:`run` (collect the host's facts and
judge them) and :func:`record` (write the stage result through
:mod:`hyport_lib.results`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from hyport_lib.environment.collect import EnvironmentReport
from hyport_lib.environment.collect import collect_environment as run  # noqa: F401 (the stage function)
from hyport_lib.results import Provenance, StageSummary, record_summary

STAGE = "01_environment"


def summary_line(report: EnvironmentReport) -> str:
    """``"5 PASS / 0 WARN / 0 FAIL / 10 SKIP on cpu; first WARN: dev_shm"``."""
    attention = [c for c in report.checks if c.verdict in ("FAIL", "WARN")]
    attention.sort(key=lambda c: c.verdict != "FAIL")  # a FAIL is named before a WARN
    first = f"; first {attention[0].verdict}: {attention[0].name}" if attention else ""
    return f"{report.summary_line()} on {report.device}{first}"


def summarize(report: EnvironmentReport) -> StageSummary:
    """The report's verdict, :func:`summary_line` and the index's figures."""
    return StageSummary(report.verdict, summary_line(report),
                        {"checks": report.summary_line(skip=False), "device": report.device,
                         "cards": report.num_cards})


def record(report: EnvironmentReport, *, directory: Optional[os.PathLike] = None,
           stage: Optional[str] = None) -> Path:
    """Write the environment report as the stage result; returns the file written."""
    return record_summary(stage or STAGE, summarize(report), data=report.to_dict(),
                          provenance=Provenance(device=report.device), directory=directory)


def record_environment(report: EnvironmentReport, stage: str = STAGE) -> Path:
    """Deprecated alias of :func:`record` (kept for one release)."""
    return record(report, stage=stage)


#: Deprecated alias of :func:`summary_line` (kept for one release).
environment_summary = summary_line
