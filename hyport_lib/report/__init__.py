"""The report runner: notebooks in order through papermill, into one offline HTML report."""

from hyport_lib.report.runner import ReportRun, StageOutcome, run_report

__all__ = ["ReportRun", "StageOutcome", "run_report"]
