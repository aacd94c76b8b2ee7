"""The full scan's checksums by name (:mod:`hyport_lib.weights.checksums`): each a fresh
hasher of its algorithm, an unknown name refused, and every name said in words."""

from __future__ import annotations

import hashlib
import zlib

import pytest
import xxhash

from hyport_lib.weights.checksums import DESCRIPTIONS, HASHERS, checksum_name, new_hasher

DATA = b"hyport" * 1000


def test_each_name_is_a_fresh_hasher_of_its_algorithm():
    expected = {"xxh3": xxhash.xxh3_64(DATA).hexdigest(), "crc32": f"{zlib.crc32(DATA):08x}",
                "sha256": hashlib.sha256(DATA).hexdigest()}
    assert set(HASHERS) == set(expected) == set(DESCRIPTIONS)
    for name, digest in expected.items():
        hasher = new_hasher(name)
        hasher.update(DATA[:10])
        hasher.update(DATA[10:])  # in pieces, as the scan feeds it
        assert hasher.hexdigest() == digest, name
        assert new_hasher(name).hexdigest() != digest  # fresh: nothing carried over


def test_an_unknown_name_is_refused_and_a_recorded_one_still_shown():
    with pytest.raises(ValueError, match="^checksum='md5': expected one of 'xxh3', 'crc32', 'sha256'$"):
        new_hasher("md5")
    assert checksum_name("xxh3") == "xxh3: XXH3-64 (xxHash, seed 0)"
    assert checksum_name("blake3") == "blake3"  # a record written by another version
