"""Test-only: make a worker fail the way a real NPU job failed, from that job's log.

The failure triage (:mod:`hyport_lib.triage`) reads what a failed rank or card left in
its log. On a CPU there is no NPU to fail, so the suite replays a real failure instead:
the worker writes the lines of a vendored log (``tests/data/npu_logs/``, each copied
from a public issue thread) to its stderr, as CANN and torch_npu would have, and then
raises. Nothing in hyport sets the switches that call this; the test suite does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO


class ReplayedFailure(RuntimeError):
    """Raised after the replayed lines; its message names the log it came from."""


def replay_failure(log_path: os.PathLike, switch: str, stream: TextIO = None) -> None:
    """Write ``log_path``'s lines to ``stream`` (stderr) and raise :class:`ReplayedFailure`.

    Args:
        log_path: the vendored log to replay.
        switch: the environment variable that asked for it, named in the message.
        stream: where the lines go; None: ``sys.stderr``.

    Raises:
        ReplayedFailure: always, after the lines are written and flushed.
        FileNotFoundError: ``log_path`` does not exist (named with the switch).
    """
    path = Path(log_path)
    if not path.is_file():
        raise FileNotFoundError(f"{switch}: no log to replay at {path}")
    stream = sys.stderr if stream is None else stream
    sys.stdout.flush()
    stream.write(path.read_text(encoding="utf-8", errors="replace").rstrip("\n") + "\n")
    stream.flush()
    raise ReplayedFailure(f"test fault: the lines above were replayed from {path.name} ({switch})")
