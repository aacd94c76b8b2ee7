"""How every ``hyport`` command ends: one place for usage errors and stop signals.

* A usage error (:data:`~hyport_lib.utils.printable.USAGE_ERRORS`, or a full disk) prints one line,
  ``hyport <command>: <message>`` (and an error's ``details`` below it) and exits 2;
  ``HYPORT_DEBUG=1`` shows the traceback instead.
* Any other exception is a defect of hyport: its traceback, one line, exit 3, so that
  scripts tell it from a command's own "failed" (1) and a usage error (2).
* The reader of the output gone (``| head``): quietly 141, as a shell reports SIGPIPE.
* SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` inside the command, whose
  ``finally`` blocks stop its processes and keep the partial result (written under
  :func:`shielded`); exit 130.

Commands never catch these themselves: :func:`invoke` does, around ``run(args)``.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import traceback
from typing import Callable, Optional

from hyport_lib.utils.printable import USAGE_ERRORS, one_line
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.signals import Stopped, shielded, stop_signals_raise

#: Exit status of a stopped command (as a shell reports Ctrl-C).
STOPPED_EXIT = 130
USAGE_EXIT = 2
INTERNAL_EXIT = 3


def invoke(name: str, run: Callable, args) -> int:
    try:
        with stop_signals_raise():
            return int(run(args) or 0)
    except Stopped as exc:
        return _stopped(name, exc)
    except KeyboardInterrupt:
        print(f"hyport {name}: interrupted; what was finished is kept", file=sys.stderr)
        return STOPPED_EXIT
    except USAGE_ERRORS as exc:
        if os.environ.get("HYPORT_DEBUG"):
            raise
        print(scrub_text(f"hyport {name}: {one_line(exc)}"), file=sys.stderr)
        for line in getattr(exc, "details", None) or ():  # e.g. every bad dataset record
            print(scrub_text(f"  {line}"), file=sys.stderr)
        return USAGE_EXIT
    except BrokenPipeError as exc:
        if not _stdout_closed():
            return _internal(name, exc)  # a pipe of the command's own broke: a defect
        return _reader_gone()
    except OSError as exc:
        if exc.errno not in _FULL_DISK:
            return _internal(name, exc)
        where = f" ({exc.filename})" if exc.filename else ""
        print(scrub_text(f"hyport {name}: {exc.strerror or one_line(exc)}{where}"), file=sys.stderr)
        return USAGE_EXIT
    except Exception as exc:
        stop = _stop_behind(exc)
        # A library's cleanup failed while the stop unwound it (libcst's codegen raises
        # KeyError from a `finally` cut short): the stop is what happened, not a defect.
        return _stopped(name, stop) if stop is not None else _internal(name, exc)


def _stopped(name: str, stop: Stopped) -> int:
    print(f"hyport {name}: stopped by {signal.Signals(stop.signum).name}; what was finished is kept",
          file=sys.stderr)
    return STOPPED_EXIT


def _stop_behind(exc: BaseException) -> Optional[Stopped]:
    """The stop signal ``exc`` was raised while handling, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, Stopped):
            return exc
        exc = exc.__context__
    return None


#: A full disk or quota is the machine's state, not a defect: one line, not a traceback.
_FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
PIPE_CLOSED_EXIT = 128 + signal.SIGPIPE


def _stdout_closed() -> bool:
    """Whether stdout's reader is gone: polling a pipe without readers reports an error (Linux)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _reader_gone() -> int:
    """stdout to the null device, so that Python's flush at exit does not fail again (the
    ``signal`` module documentation's recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED_EXIT


def _internal(name: str, exc: BaseException) -> int:
    """Called within the ``except`` clause, so that the traceback is the exception's."""
    if os.environ.get("HYPORT_DEBUG"):
        raise exc
    print(scrub_text(traceback.format_exc()), file=sys.stderr, end="")
    print(scrub_text(f"hyport {name}: internal error ({type(exc).__name__}: {one_line(exc)}); "
                     f"please report it with the traceback above"), file=sys.stderr)
    return INTERNAL_EXIT


def run_showing_partial(call: Callable, bar, show: Callable):
    """``show(call())``; stopped, ``show`` the partial result the exception carries
    (``exc.partial``) before the stop goes on."""
    try:
        result = call()
    except KeyboardInterrupt as exc:
        bar.close()
        partial = getattr(exc, "partial", None)
        if partial is not None:
            with shielded():
                show(partial)
        raise
    finally:
        bar.close()
    return show(result)
