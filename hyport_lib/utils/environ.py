"""Environment variables set for a while in this process, and put back afterwards."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping


@contextlib.contextmanager
def environ_set(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` inside the block; each variable restored (or removed,
    when it was unset) afterwards, also when the block raises."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
