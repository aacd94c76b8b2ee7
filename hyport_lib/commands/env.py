"""``hyport env``: the environment check from the command line (stage 01's other client).

Prints the report (``--json``: as JSON) and records the stage result (see
:mod:`._stage` for the flags and exit status). ``--host-root TREE`` judges the container
and driver checks on a copy of a host's or a container's folders instead of this
machine's (``docs/containers.md``).
"""

from __future__ import annotations

from hyport_lib.commands._stage import StageCommand
from hyport_lib.environment.stage import report_text, result_data

COMMAND = StageCommand("environment", text=lambda report: report_text(report).rstrip("\n"), json=result_data)
