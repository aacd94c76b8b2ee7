"""Where the processes hyport starts write CANN's logs, so that triage reads only theirs.

CANN's default log folder is shared by every job of the user, so reading it after a failure
could blame one card for another's error: each NPU worker gets a folder of its own, unless
the user set ``ASCEND_PROCESS_LOG_PATH`` (then triage reads it from the worker's start on).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.triage.model import Triage
from hyport_lib.triage.scan import triage
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import scrub_secret_shapes, scrub_text

CANN_LOG_VAR = "ASCEND_PROCESS_LOG_PATH"


def own_cann_log_env(folder: os.PathLike, environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The CANN log variable for a child's environment: ``folder`` (created) when the user
    did not set it; ``{}`` for their absolute path; their relative path made absolute (the
    child may start in another working folder than the one hyport reads the logs from)."""
    environ = os.environ if environ is None else environ
    chosen = (environ.get(CANN_LOG_VAR) or "").strip()
    if chosen:
        return {} if Path(chosen).is_absolute() else {CANN_LOG_VAR: str(Path(chosen).resolve())}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return {CANN_LOG_VAR: str(folder)}


def shared_cann_note(folder: Optional[Path]) -> str:
    """What a diagnosis says when its CANN folder is the user's: other cards' and jobs'
    logs may be in it, so a finding from it may be theirs."""
    return (f"CANN's log folder {folder} was chosen with {CANN_LOG_VAR} and is shared with the other "
            f"cards and jobs: a finding from it may belong to another one")


def diagnose(paths, *, cann_dir: Optional[Path], since: float,
             environ: Optional[Mapping[str, str]] = None) -> dict:
    """:func:`~hyport_lib.triage.scan.triage` of a failed worker's logs (``paths`` that exist,
    CANN logs of ``cann_dir`` since ``since``), as ``Triage.to_dict()``. Never raises: a
    stage calls it with its results still to write, so a failure becomes the record's note.
    """
    existing = [Path(p) for p in paths if p and Path(p).exists()]
    try:
        return triage(existing, cann_log_dir=cann_dir, since=since, environ=environ).to_dict()
    except Exception as exc:  # a diagnosis must never cost the stage its results
        note = f"the logs could not be read for a diagnosis: {type(exc).__name__}: {exc}"
        note = scrub_secret_shapes(scrub_text(printable(note), {**os.environ, **(environ or {})}))
        return Triage(notes=[note]).to_dict()
