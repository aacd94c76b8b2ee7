"""``python -m hyport_lib`` == ``hyport``."""

from hyport_lib.commands import cli

cli()
