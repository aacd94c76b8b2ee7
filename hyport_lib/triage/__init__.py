"""Failure triage for NPU jobs: what the logs of a failed run mean and what to do
(``docs/triage.md``)."""

from hyport_lib.triage.catalogue import CATALOGUE, recognise
from hyport_lib.triage.log_files import cann_log_dir, find_logs, own_cann_log_env, shared_cann_note
from hyport_lib.triage.result import Triage, show_triage, triage_frame, triage_markdown, triage_text
from hyport_lib.triage.scan import diagnose, triage

__all__ = ["CATALOGUE", "Triage", "cann_log_dir", "diagnose", "find_logs", "own_cann_log_env", "recognise",
           "shared_cann_note", "show_triage", "triage", "triage_frame", "triage_markdown", "triage_text"]
