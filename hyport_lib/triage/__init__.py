"""Failure triage for NPU jobs: what the logs of a failed run mean and what to do.

:func:`triage` matches the lines of a run's logs (and CANN's since the run began) against
:mod:`.catalogue` and returns a :class:`Triage`; :mod:`.show` draws it.
"""

from hyport_lib.triage.catalogue import BY_KEY, CATALOGUE, ERROR, WARNING, KnownFailure, recognise
from hyport_lib.triage.discovery import cann_log_dir, cann_logs, find_logs
from hyport_lib.triage.model import Finding, Place, Triage, Unrecognised
from hyport_lib.triage.scan import triage
from hyport_lib.triage.show import show_triage, triage_frame, triage_markdown, triage_text

__all__ = ["BY_KEY", "CATALOGUE", "ERROR", "WARNING", "Finding", "KnownFailure", "Place", "Triage",
           "Unrecognised", "cann_log_dir", "cann_logs", "find_logs", "recognise", "show_triage",
           "triage", "triage_frame", "triage_markdown", "triage_text"]
