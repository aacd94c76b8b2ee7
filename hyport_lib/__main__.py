"""``python -m hyport_lib`` == ``hyport``."""

import sys

from hyport_lib.commands import main

sys.exit(main())
