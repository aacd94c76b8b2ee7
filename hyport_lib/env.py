"""``python -m hyport_lib.env``: same as ``hyport env`` (works without the console script)."""

from __future__ import annotations

import sys

from hyport_lib.commands import main


def _main(argv=None) -> int:
    return main(["env", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(_main())
