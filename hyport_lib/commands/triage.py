"""``hyport triage PATH [PATH ...]``: what the logs of a failed NPU job mean, and what to do;
with several nodes' logs (``logs/node<k>.log``, or ``--nodes``), which node stopped first.

Exit status: 0 when no error line was found (a warning alone is no failure), 1 when a
failure was found (recognised or not), 2 for a missing path, a bad argument, or when no
log could be read at all ("no error line" would then be claimed of logs nobody read).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path

from hyport_lib.triage import Triage, cann_log_dir, triage, triage_text
from hyport_lib.utils.wording import counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a run folder (outputs/<run-id>), a log folder or a log file")
    parser.add_argument("--cann-logs", metavar="DIR", default=None,
                        help="CANN's log folder to read as well (default with --since / --all: "
                             "$ASCEND_PROCESS_LOG_PATH, else ~/ascend/log)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--since", metavar="ISO", default=None,
                      help="read only CANN logs modified at or after this local time, e.g. "
                           "2026-12-01T14:30")
    when.add_argument("--all", action="store_true",
                      help="read every CANN log in the folder, whatever its age")
    parser.add_argument("--nodes", action="store_true",
                        help="each PATH holds one node's logs, in node-rank order (hosts' log folders "
                             "copied side by side); without it, hyport's logs/node<k>.log files name "
                             "the nodes")
    parser.add_argument("--json", action="store_true", help="print the triage as JSON")


def parse_since(text: str) -> float:
    """An ISO time, local when it names no zone."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: expected an ISO time such as 2026-12-01T14:30") from None


#: Said when CANN's folder was asked for but cannot be told.
NO_CANN_FOLDER = ("CANN logs not read: ASCEND_PROCESS_LOG_PATH is not set and there is no home "
                  "folder (HOME unset, no passwd entry); name the folder with --cann-logs DIR")


def cann_choice(args: argparse.Namespace) -> tuple[Path | None, float | None, list[str]]:
    """The CANN folder to read (None: none), the time from which its files count, and why a
    folder asked for is not read."""
    since = parse_since(args.since) if args.since is not None else None
    if args.cann_logs is not None:
        folder = Path(args.cann_logs).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"--cann-logs {folder}: no such folder")
        return folder, since, []
    if since is not None or args.all:
        folder = cann_log_dir(os.environ)
        return folder, since, [] if folder is not None else [NO_CANN_FOLDER]
    return None, None, []


def nothing_read(result: Triage, paths: list[str]) -> str:
    """The error for a triage that read no file: the first reason, or what was looked for."""
    if result.notes:
        more = len(result.notes) - 1
        return f"no log could be read: {result.notes[0]}" + (f" (and {counted(more, 'more note')})" if more else "")
    return (f"no log file under {', '.join(paths)} (looked for *.log, *.txt, *.out, *.err, "
            f"stdout, stderr)")


def run(args: argparse.Namespace) -> int:
    for path in args.paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
    folder, since, notes = cann_choice(args)
    if args.nodes and len(args.paths) < 2:
        raise ValueError(f"--nodes: expected the logs of two nodes or more, got {len(args.paths)} PATH")
    result = triage(args.paths, cann_log_dir=folder, since=since, nodes_by_path=args.nodes)
    result.notes.extend(notes)
    if not result.files_read:
        raise FileNotFoundError(nothing_read(result, args.paths))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        if folder is not None:
            span = "every file" if since is None else \
                f"files modified since {datetime.fromtimestamp(since).isoformat(timespec='seconds')}"
            print(f"CANN logs: {folder} ({span})")
        print("\n".join(triage_text(result)))
    return 1 if result.failed else 0
