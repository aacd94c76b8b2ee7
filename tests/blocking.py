"""A call that must not block: run it in a thread and fail where it is still blocked (a FIFO
read, a lock, a resolver), instead of hanging the suite."""

from __future__ import annotations

import threading


def returns_within(call, seconds: float = 5.0):
    """``call()``'s value, or a test failure where it is still blocked after ``seconds``."""
    done = {}
    worker = threading.Thread(target=lambda: done.update(value=call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds:g} s"
    return done["value"]
