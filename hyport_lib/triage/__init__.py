"""Failure triage for NPU jobs: what the logs of a failed run mean and what to do.

:func:`triage` reads a run folder, log folders or files (and, optionally, the CANN log
folder limited to the failed run's time), matches every line against a catalogue of known
failures (:mod:`.catalogue`, built from real logs users posted in public issue threads) and
returns a :class:`Triage`: deduplicated findings with where they show, what they mean and
what to do, and the error lines nothing explains. :mod:`.show` draws it; ``hyport triage``
prints it.
"""

from hyport_lib.triage.catalogue import BY_KEY, CATALOGUE, ERROR, WARNING, KnownFailure, recognise
from hyport_lib.triage.discovery import cann_log_dir, cann_logs, find_logs
from hyport_lib.triage.model import Finding, Place, Triage, Unrecognised
from hyport_lib.triage.scan import triage
from hyport_lib.triage.show import show_triage, triage_frame, triage_markdown, triage_text

__all__ = ["BY_KEY", "CATALOGUE", "ERROR", "WARNING", "Finding", "KnownFailure", "Place", "Triage",
           "Unrecognised", "cann_log_dir", "cann_logs", "find_logs", "recognise", "show_triage",
           "triage", "triage_frame", "triage_markdown", "triage_text"]
