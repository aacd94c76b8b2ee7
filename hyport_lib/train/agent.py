"""``python -m hyport_lib.train.agent ARGS...``: torchrun, made to die with its launcher: the
stdin guard (:func:`hyport_lib.processes.start_guard`) starts in this process group, which then
*becomes* torchrun (``exec``: same pid, same group); the workers have guards of their own.
"""

from __future__ import annotations

import os
import sys

from hyport_lib.processes import start_guard


def main(argv: list[str]) -> None:
    start_guard(log=sys.stderr)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
