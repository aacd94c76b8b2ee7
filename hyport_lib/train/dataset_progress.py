"""Progress of reading and tokenising a dataset (minutes for 100,000 records on a CPU).

The readers report to the ``on_progress`` they are given or to the one :func:`reporting_to` sets
for a block: the stage contract's ``plan(params)`` takes no callback, so ``hyport train`` wraps
it in ``with reporting_to(bar):``. Elsewhere reading is silent.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

#: The least time between two progress reports (a report per record would cost more
#: than the record).
TICK_SECONDS = 0.5


@dataclass(frozen=True)
class DatasetProgress:
    """Where the reading (``phase``: ``reading dataset`` or ``tokenising dataset``) of the data
    file ``path`` stands; ``total`` is None while reading a file (known at the end)."""

    phase: str
    done: int
    total: Optional[int]
    path: str


OnProgress = Callable[[DatasetProgress], None]

_REPORT_TO: ContextVar[Optional[OnProgress]] = ContextVar("hyport_dataset_progress", default=None)


@contextmanager
def reporting_to(on_progress: OnProgress) -> Iterator[None]:
    """Within the block, datasets read or tokenised without a callback of their own report to ``on_progress``."""
    token = _REPORT_TO.set(on_progress)
    try:
        yield
    finally:
        _REPORT_TO.reset(token)


class ProgressTicker:
    """Calls ``on_progress`` (None: the one :func:`reporting_to` set, if any) at the start,
    at most every :data:`TICK_SECONDS`, and at the end."""

    def __init__(self, on_progress: Optional[OnProgress], phase: str, path: str, total: Optional[int] = None):
        self.on_progress = on_progress if on_progress is not None else _REPORT_TO.get()
        self.phase, self.path, self.total = phase, path, total
        self._last = 0.0
        if self.on_progress is not None:
            self._report(0)

    def _report(self, done: int) -> None:
        self._last = time.monotonic()
        self.on_progress(DatasetProgress(self.phase, done, self.total, self.path))

    def tick(self, done: int) -> None:
        if self.on_progress is not None and time.monotonic() - self._last >= TICK_SECONDS:
            self._report(done)

    def finish(self, done: int) -> None:
        if self.on_progress is not None:
            self.total = done if self.total is None else self.total
            self._report(done)
