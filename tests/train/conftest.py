"""Fixtures the tests of stage 04's data path share: the tiny model's processor and the bundled
smoke set, each made once per module."""

from __future__ import annotations

import pytest

from hyport_lib.models.loading import load_processor
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.train.smoke_data import write_smoke_dataset


@pytest.fixture(scope="module")
def processor():
    return load_processor(ensure_tiny_model())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return write_smoke_dataset(tmp_path_factory.mktemp("smoke"))
