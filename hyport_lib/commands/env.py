"""``hyport env``: stage 01's environment check from the command line. ``--host-root TREE``
judges a copy of a host's or container's folders instead (``docs/containers.md``).
"""

from __future__ import annotations

from hyport_lib.commands._stage import StageCommand
from hyport_lib.environment.stage import report_text

COMMAND = StageCommand("environment", text=lambda report: report_text(report).rstrip("\n"))
