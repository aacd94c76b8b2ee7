"""``python -m hyport_lib.env``: same as ``hyport env`` (works without the console script)."""

import sys

from hyport_lib.commands import main

sys.exit(main(["env", *sys.argv[1:]]))
