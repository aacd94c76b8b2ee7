"""The report runner: notebooks in order through papermill, into one offline HTML report."""

from hyport_lib.report.run import ReportRun, StageOutcome
from hyport_lib.report.runner import run_report

__all__ = ["ReportRun", "StageOutcome", "run_report"]
