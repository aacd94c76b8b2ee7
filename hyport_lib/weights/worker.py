"""The child side of :mod:`.runner`: ``python -m hyport_lib.weights.worker --result PATH``.

Reads one JSON line of configuration on stdin (the rest of stdin is the guard's lifeline,
:func:`hyport_lib.processes.start_guard`), runs the task and writes its return value
(``status: ok``) or its exception (``status: failed``, type and first line; the traceback
to the log) to ``--result`` atomically, with the process's peak memory.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import sys
import time
import traceback
from typing import Optional, Sequence

from hyport_lib.processes import exit_without_teardown, start_guard
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj, scrub_text

#: task -> "module:function" (imported only in the child that runs it).
TASK_FUNCTIONS = {
    "reload": "hyport_lib.weights.reload:reload_in_child",
    "parity": "hyport_lib.weights.parity:parity_in_child",
    "zero": "hyport_lib.weights.zero_consolidate:consolidate_in_child",
}


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports KiB, macOS bytes); RUSAGE_SELF,
    as ``RUSAGE_CHILDREN`` would be the maximum over every child the launcher reaped."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def run(spec: dict) -> dict:
    task = spec.get("task")
    if task not in TASK_FUNCTIONS:
        raise ValueError(f"task={task!r}: expected one of {', '.join(TASK_FUNCTIONS)}")
    module, _, function = TASK_FUNCTIONS[task].partition(":")
    return getattr(importlib.import_module(module), function)(spec)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyport_lib.weights.worker",
                                     description="One task of hyport's weight verification.")
    parser.add_argument("--result", required=True, help="where to write the result JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        # One line only: whatever follows belongs to the guard (end-of-file).
        spec = json.loads(sys.stdin.buffer.readline().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        spec, error = {}, exc
    else:
        error = None
    guard = start_guard()  # the rest of stdin is the lifeline: this process group ends with the launcher
    print(f"[hyport weights] task {spec.get('task')} pid {os.getpid()}"
          + (f" guard pid {guard}" if guard else ""), flush=True)
    try:
        if error is not None:
            raise ValueError(f"the task configuration on stdin is not JSON ({error})")
        payload = {"status": "ok", **run(spec)}
        code = 0
    except Exception as exc:  # the process boundary: every failure becomes a result
        sys.stderr.write(scrub_text(traceback.format_exc()))
        sys.stderr.flush()
        text = scrub_text(str(exc)).strip()
        payload = {"status": "failed", "error_type": type(exc).__name__,
                   "error": (text.splitlines() or [""])[0][:1000]}
        code = 1
    payload.update(pid=os.getpid(), peak_rss_bytes=peak_rss_bytes(),
                   wall_s=round(time.monotonic() - started, 3))
    atomic_write_json(args.result, scrub_obj(payload))
    print(f"[hyport weights] {spec.get('task')} {payload['status']} in {payload['wall_s']:.1f}s", flush=True)
    exit_without_teardown(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
