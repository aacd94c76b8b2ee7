"""hyport's attention names (npu_attention/names.py): the backend each means and where it runs
(which names a device can run at all: test_runnable.py)."""

from __future__ import annotations

import pytest

from hyport_lib.npu_attention.names import BACKEND_OF_NAME, NAME_OF_BACKEND, backend_of, check_runs_on


def test_every_name_means_one_backend_and_none_says_sdpa_or_flash():
    assert NAME_OF_BACKEND and len(BACKEND_OF_NAME) == len(NAME_OF_BACKEND)
    for backend, name in NAME_OF_BACKEND.items():
        assert backend_of(name) == backend
        assert name.startswith("hyport_") and "sdpa" not in name and "flash" not in name
    with pytest.raises(ValueError, match=r"attn_implementation='hyport_flash': not one of hyport's attentions "
                                         r"\(hyport_npu_emulated, hyport_npu_fused, hyport_torch\)"):
        backend_of("hyport_flash")


def test_the_fused_kernel_runs_on_an_npu_only():
    check_runs_on("hyport_npu_fused", "npu")
    check_runs_on("hyport_npu_emulated", "cpu")
    check_runs_on("hyport_torch", "cuda")
    with pytest.raises(ValueError, match="npu_fusion_attention runs on an Ascend NPU only, and this run's "
                                         "device is cuda; use 'hyport_npu_emulated'"):
        check_runs_on("hyport_npu_fused", "cuda")
