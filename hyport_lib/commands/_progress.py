"""One tqdm bar on stderr, fed by a stage's ``on_progress`` callback; each command says how
to read its stage's progress object."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

Reader = Callable[[Any], Any]


class TerminalBar:
    """A progress callback drawing one tqdm bar on stderr. ``total``, ``done``, ``postfix``
    and ``phase`` read a progress object; a new phase starts a new bar, labelled by it."""

    def __init__(self, desc: str, unit: str, *, total: Reader, done: Reader,
                 postfix: Optional[Reader] = None, phase: Optional[Reader] = None,
                 unit_scale: bool = False):
        self.desc, self.unit, self.unit_scale = desc, unit, unit_scale
        self._total, self._done, self._postfix, self._phase = total, done, postfix, phase
        self.bar = None
        self.current_phase = None

    def __call__(self, progress) -> None:
        from tqdm import tqdm

        phase = self._phase(progress) if self._phase else None
        if self.bar is None or phase != self.current_phase:
            self.close()
            self.current_phase = phase
            self.bar = tqdm(total=self._total(progress), file=sys.stderr, desc=phase or self.desc,
                            unit=self.unit, unit_scale=self.unit_scale)
        if self._postfix is not None:
            text = self._postfix(progress)
            if text:
                self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(self._done(progress) - self.bar.n)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
