"""Stop signals as exceptions (:func:`stop_signals_raise`), and writes they cannot cut
short (:func:`shielded`: a partial report is finished even when Ctrl-C comes again).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Optional

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    shield_depth = 0
    pending: Optional[int] = None


def _handler(signum, frame):
    if _State.shield_depth:
        _State.pending = signum  # honoured when the shielded block ends
        return
    raise Stopped(signum)


@contextlib.contextmanager
def shielded():
    """Within the block, stop signals are held back (not lost) so a write completes."""
    _State.shield_depth += 1
    try:
        yield
    finally:
        _State.shield_depth -= 1
        if not _State.shield_depth and _State.pending is not None:
            signum, _State.pending = _State.pending, None
            raise Stopped(signum)


@contextlib.contextmanager
def stop_signals_raise():
    """SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` within the block, so ``finally``
    blocks stop child processes (nothing changes outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, *STOP_SIGNALS)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        signal.signal(sig, _handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
