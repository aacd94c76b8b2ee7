"""Failure triage for NPU jobs: what the logs of a failed run mean and what to do.

:func:`triage` matches the lines of a run's logs (and CANN's since the run began) against
:mod:`.catalogue` and returns a :class:`Triage`, which :mod:`.result` also draws.
"""

from hyport_lib.triage.catalogue import BY_KEY, CATALOGUE, ERROR, WARNING, KnownFailure, recognise
from hyport_lib.triage.log_files import cann_log_dir, cann_logs, find_logs, own_cann_log_env, shared_cann_note
from hyport_lib.triage.result import (Finding, Place, Triage, Unrecognised, show_triage, triage_frame,
                                      triage_markdown, triage_text)
from hyport_lib.triage.scan import diagnose, triage

__all__ = ["BY_KEY", "CATALOGUE", "ERROR", "WARNING", "Finding", "KnownFailure", "Place", "Triage",
           "Unrecognised", "cann_log_dir", "cann_logs", "diagnose", "find_logs", "own_cann_log_env",
           "recognise", "shared_cann_note", "show_triage", "triage", "triage_frame", "triage_markdown",
           "triage_text"]
