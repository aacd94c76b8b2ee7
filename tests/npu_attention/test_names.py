"""hyport's attention names (npu_attention/names.py): the backend each means, where it runs,
and the names a process could load, refused before any process starts."""

from __future__ import annotations

import re

import pytest

from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.npu_attention.names import (BACKEND_OF_NAME, NAME_OF_BACKEND, backend_of,
                                            check_attn_implementation, check_runs_on)


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


@pytest.mark.parametrize("name", ["eager", "sdpa", "flash_attention_2", "paged|sdpa", "hyport_torch",
                                  "paged|hyport_npu_emulated", "kernels-community/flash-attn"])
def test_a_name_some_process_could_load_passes(name):
    check_attn_implementation(name)


@pytest.mark.parametrize("name, says", [
    ("foo", "attn_implementation='foo': not an attention transformers knows; expected one of "),
    ("paged|foo", "attn_implementation='paged|foo': not an attention transformers knows"),
    ("hyport_nope", "attn_implementation='hyport_nope': not one of hyport's attentions"),
])
def test_a_name_no_process_could_load_is_refused_naming_the_parameter(name, says):
    with pytest.raises(ValueError, match="^" + re.escape(says)) as refused:
        check_attn_implementation(name)
    assert "\n" not in str(refused.value)


def test_the_refusal_names_the_parameter_as_the_caller_calls_it():
    with pytest.raises(ValueError, match=r"^attn_impl='foo': not an attention transformers knows"):
        check_attn_implementation("foo", param="attn_impl")


def test_a_hyport_name_registered_in_this_process_is_known():
    with pytest.raises(ValueError, match="not one of hyport's attentions"):
        check_attn_implementation("hyport_names_test")
    register_hyport_attention("sdpa", name="hyport_names_test")
    check_attn_implementation("hyport_names_test")
