"""The checksums of the full scan, by the name the ``checksum`` parameter takes.

* ``xxh3`` (the default): XXH3-64, seed 0 (what ``xxhsum -H3`` prints), 20-30 GB/s on one
  core, so the scan is bound by the read. Finds corruption, not deliberate tampering.
* ``crc32``: zlib's CRC-32, 2-4 GB/s, for comparing with scans recorded with it.
* ``sha256``: 1.2-1.8 GB/s with SHA-NI, when a checksum must stand up to deliberate changes.

``update`` must release the GIL on large buffers to overlap with the reader thread
(:mod:`.scan`): python-xxhash 4.x does above 64 KiB (``XXHASH_DO_UPDATE`` in its
``src/_xxhash.c``), ``zlib.crc32`` above 5 KiB, ``hashlib`` above 2 KiB.
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

