"""Static port scan: where a source tree still assumes CUDA, flash-attn or NCCL.

The seed port's last check was "neither the code nor the requirements mention
flash_attn any more"; this package makes that check (and its siblings) repeatable.
Python files are read through the AST, dependency files line by line, and each
finding comes with the line, the category and what to write instead on Ascend.

What is found, and why prose is not: see ``python_code`` (the AST rules) and
``dependencies`` (requirements*.txt, pyproject.toml, setup.py, setup.cfg,
environment*.yml, ``pip install`` lines of *.sh / Dockerfiles). Code whose job is a CUDA
call (a backend seam) marks the line with a ``hyport-scan: ignore`` comment, or the
file with ``hyport-scan: ignore-file`` in its first ten lines.

Public names:
    scan_path(path, *, exclude=DEFAULT_EXCLUDE) -> ScanReport
    ScanReport, Hit: the results (``report.frame()``, ``report.counts()``, ``report.clean``).
    show_scan(report): counts and a table, for notebooks.
    CATEGORIES, DEFAULT_EXCLUDE.
"""

from __future__ import annotations

from hyport_lib.scan.model import Hit, ScanReport
from hyport_lib.scan.rules import CATEGORIES
from hyport_lib.scan.scanner import DEFAULT_EXCLUDE, scan_path
from hyport_lib.scan.show import show_scan

__all__ = ["CATEGORIES", "DEFAULT_EXCLUDE", "Hit", "ScanReport", "scan_path", "show_scan"]
