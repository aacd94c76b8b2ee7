"""Progress of reading and tokenising a dataset, said while it happens.

Tokenising 100,000 records takes minutes on a CPU; before this, ``hyport train`` said
nothing until every record was done. The readers (:func:`hyport_lib.train.dataset.load_dataset`,
:func:`hyport_lib.train.samples.encode_records`) report through a :class:`ProgressTicker`:
once at the start (the first line comes at once), then at most every
:data:`TICK_SECONDS`, then once at the end.

They report to the ``on_progress`` callback they are given or, without one, to the one
:func:`reporting_to` sets for a block of code: the stage contract's ``plan(params)`` takes
no callback, so ``hyport train`` wraps its plan in ``with reporting_to(bar):``. Outside
such a block (notebooks, ``hyport report``, the training processes) reading is silent.
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
    """Where the reading of a dataset stands.

    Attributes:
        phase: ``reading dataset`` or ``tokenising dataset``.
        done: records read (or tokenised) so far.
        total: records to do, when known (None while reading a file: its length is known at the end).
        path: the data file.
    """

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
