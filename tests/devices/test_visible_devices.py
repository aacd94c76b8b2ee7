"""The visible-devices variables: what each runtime sees, the ids a run pins, and the
judgement, strict only for the backend that reads the variable."""

from __future__ import annotations

import pytest

from hyport_lib.devices import visible_devices
from hyport_lib.devices.visible_devices import check_visible_devices, parse_visible_devices


def test_space_truncates_the_ascend_list():
    assert parse_visible_devices("1, 2,3", "ASCEND_RT_VISIBLE_DEVICES") == [1]
    check = check_visible_devices("1, 2,3", "ASCEND_RT_VISIBLE_DEVICES")
    assert check.verdict == "FAIL"
    assert "only cards [1]" in check.reason and "'1,2,3'" in check.reason


def test_cuda_strips_spaces_but_we_still_warn():
    assert parse_visible_devices("1, 2,3", "CUDA_VISIBLE_DEVICES") == [1, 2, 3]
    assert check_visible_devices("1, 2,3", "CUDA_VISIBLE_DEVICES").verdict == "WARN"


@pytest.mark.parametrize("value, available, verdict, words", [
    (None, None, "SKIP", ["not set"]),
    ("", None, "FAIL", ["empty"]),
    ("0,1,2,3", 8, "PASS", ["[0, 1, 2, 3]"]),
    ("3", None, "PASS", ["[3]"]),
    ("0,0", None, "FAIL", ["twice"]),
    ("0,a,2", None, "FAIL", ["'a'", "[0]"]),
    ("0,-1", None, "FAIL", ["'-1'"]),
    ("0,,1", None, "FAIL", ["empty entry", "[0]"]),
    ("0,1,", None, "WARN", ["comma", "'0,1'"]),
    ("6,8", 8, "FAIL", ["card 8 does not exist"]),
])
def test_visible_devices_syntax(value, available, verdict, words):
    check = check_visible_devices(value, "ASCEND_RT_VISIBLE_DEVICES", available)
    assert check.verdict == verdict, check.reason
    for word in words:
        assert word in check.reason


def test_cuda_uuid_and_duplicates():
    assert check_visible_devices("GPU-5e4c1f,GPU-77aa", "CUDA_VISIBLE_DEVICES").verdict == "PASS"
    assert parse_visible_devices("1,1", "CUDA_VISIBLE_DEVICES") == []  # torch shows none


@pytest.mark.parametrize("value", ["", "-1", " -1 "])
def test_hidden_gpus_are_judged_by_the_backend(value):
    var = "CUDA_VISIBLE_DEVICES"
    on_cpu = check_visible_devices(value, var, kind="cpu")
    assert on_cpu.verdict == "PASS" and "GPUs hidden" in on_cpu.reason, on_cpu.reason
    on_npu = check_visible_devices(value, var, available=8, kind="npu")
    assert on_npu.verdict == "SKIP" and "npu backend does not read it" in on_npu.reason
    for kind in ("cuda", None):  # None: judged for the backend that reads it
        strict = check_visible_devices(value, var, kind=kind)
        assert strict.verdict == "FAIL", strict.reason
        assert "no card will be visible to the cuda backend" in strict.reason


@pytest.mark.parametrize("value", ["", "-1", "1, 2,3", "0,,1", "0,0", "0,a", "6,8", "0,1,", "0,1"])
@pytest.mark.parametrize("var", ["ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_another_backends_variable_never_fails(var, value):
    own = "npu" if var.startswith("ASCEND") else "cuda"
    others = {"npu", "cuda", "cpu"} - {own}
    assert others == {"cpu", "cuda" if own == "npu" else "npu"}
    for kind in others:
        check = check_visible_devices(value, var, available=2, kind=kind)
        assert check.verdict != "FAIL", (kind, check.reason)
        assert var in check.reason
        strict = check_visible_devices(value, var)  # the host count is not this backend's
        if strict.verdict == "FAIL" and not visible_devices.hides_all_cards(value, var):
            assert check.verdict == "WARN" and f"the {kind} backend does not read it" in check.reason


def test_ascend_space_still_fails_on_npu_only():
    var = "ASCEND_RT_VISIBLE_DEVICES"
    on_npu = check_visible_devices("1, 2,3", var, available=8, kind="npu")
    assert on_npu.verdict == "FAIL" and "only cards [1]" in on_npu.reason
    on_cuda = check_visible_devices("1, 2,3", var, kind="cuda")
    assert on_cuda.verdict == "WARN" and "only cards [1]" in on_cuda.reason
    assert check_visible_devices("", var, kind="npu").verdict == "FAIL"  # every NPU hidden
    assert check_visible_devices("", var, kind="cpu").verdict == "PASS"


@pytest.mark.parametrize("value, var, ids", [
    (None, "ASCEND_RT_VISIBLE_DEVICES", None),
    ("4,5", "ASCEND_RT_VISIBLE_DEVICES", [4, 5]),
    ("4, 5", "ASCEND_RT_VISIBLE_DEVICES", [4]),  # what the Ascend runtime reads
    ("", "ASCEND_RT_VISIBLE_DEVICES", []),
    ("-1", "CUDA_VISIBLE_DEVICES", []),
    ("2, 0", "CUDA_VISIBLE_DEVICES", [2, 0]),
    ("1,1", "CUDA_VISIBLE_DEVICES", []),
    ("GPU-5e4c1f,GPU-77aa", "CUDA_VISIBLE_DEVICES", None),  # not mappable to indices
])
def test_visible_card_ids(value, var, ids):
    assert visible_devices.visible_card_ids(value, var) == ids
