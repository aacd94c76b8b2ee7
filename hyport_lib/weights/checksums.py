"""The checksums of the full scan, by the name the ``checksum`` parameter takes; speeds and
when to pick which: docs/weights.md, "Full scan". ``update`` must release the GIL on large
buffers to overlap with the reader thread (:mod:`.scan`).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Callable

import xxhash

DEFAULT_CHECKSUM = "xxh3"


class _Crc32:
    """zlib's CRC-32 as a :mod:`hashlib` hasher."""

    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


#: Name (the ``checksum`` parameter's value) -> a factory of fresh hashers.
HASHERS: dict[str, Callable[[], object]] = {
    "xxh3": xxhash.xxh3_64,
    "crc32": _Crc32,
    "sha256": hashlib.sha256,
}

#: Name -> how the documents and the displays call it.
DESCRIPTIONS = {
    "xxh3": "XXH3-64 (xxHash, seed 0)",
    "crc32": "CRC-32 (zlib)",
    "sha256": "SHA-256",
}


def checksum_name(algorithm: str) -> str:
    """How displays name ``algorithm`` (its own name when it is not one of ours: a record
    written by another version)."""
    return f"{algorithm}: {DESCRIPTIONS[algorithm]}" if algorithm in DESCRIPTIONS else algorithm


def new_hasher(algorithm: str):
    """ValueError when ``algorithm`` is not a key of :data:`HASHERS`."""
    try:
        return HASHERS[algorithm]()
    except KeyError:
        raise ValueError(f"checksum={algorithm!r}: expected one of "
                         f"{', '.join(map(repr, HASHERS))}") from None

