"""Which releases go together: the torch / torch_npu / CANN table and the one documented
CANN / driver pairing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyport_lib.environment.compat import (TORCH_NPU_COMPAT, check_cann_compat, check_driver_cann,
                                           check_torch_npu_compat, releases_for_torch)
from hyport_lib.devices.ascend_versions import DriverVersions, read_driver_versions

from .test_container import build_tree


@pytest.mark.parametrize("torch_v, npu_v, verdict, words", [
    ("2.8.0", "2.8.0", "PASS", ["CANN 8.3.RC1"]),
    ("2.8.0+cpu", "2.8.0.post1", "PASS", ["not in hyport's table"]),  # the seed host
    ("2.5.0", "2.5.1", "WARN", ["torch==2.5.1"]),
    ("2.13.0+cpu", "2.8.0.post1", "FAIL", ["torch 2.8", "torch==2.8.0"]),
    ("2.1.0", "2.4.0.post4", "FAIL", ["torch_npu 2.4.*", "2.1.0.post17"]),
    ("2.8.0", None, "SKIP", ["not installed"]),
    (None, "2.8.0", "FAIL", ["torch is not"]),
])
def test_torch_npu_compat(torch_v, npu_v, verdict, words):
    check = check_torch_npu_compat(torch_v, npu_v)
    assert check.name == "torch_npu_compat"
    assert check.verdict == verdict, check.reason
    for word in words:
        assert word in check.reason


def test_compat_table_rows_are_consistent():
    from packaging.version import Version

    for npu_v, pairing in TORCH_NPU_COMPAT.items():
        assert Version(npu_v).release[:2] == Version(pairing.torch).release[:2], npu_v
        assert check_torch_npu_compat(pairing.torch, npu_v).verdict == "PASS", npu_v
        assert check_cann_compat(npu_v, pairing.cann).verdict == "PASS", npu_v
    assert [k for k, _ in releases_for_torch("2.8.0")] == ["2.8.0.post4", "2.8.0.post2", "2.8.0"]


def test_compat_names_the_bad_argument():
    with pytest.raises(ValueError, match="torch_npu_version"):
        check_torch_npu_compat("2.8.0", "not-a-version")


@pytest.mark.parametrize("npu_v, cann, verdict", [
    ("2.8.0", "8.3.RC1", "PASS"), ("2.8.0", "CANN-8.3.rc1", "PASS"), ("2.8.0", "8.5.0", "WARN"),
    ("2.8.0", None, "SKIP"), ("2.8.0.post1", "8.3.RC1", "SKIP"), (None, "8.3.RC1", "SKIP"),
])
def test_cann_compat(npu_v, cann, verdict):
    assert check_cann_compat(npu_v, cann).verdict == verdict


@pytest.mark.parametrize("driver, cann, verdict, words", [
    ("25.3.rc1", "8.5.0", "PASS", "Ascend HDK 25.3.X"),
    ("25.5.0", "8.5.0", "PASS", "Ascend HDK 25.5.X"),
    ("24.1.rc3", "8.5.0", "FAIL", "driver 24.1.rc3 is older than all of them"),
    # newer than the notes (which predate them): not judged a FAIL
    ("25.7.rc1", "8.5.0", "WARN", "not among them and not older than them"),
    ("26.0.rc1", "8.5.0", "WARN", "check the pairing in the driver's own release notes"),
    ("weird", "8.5.0", "WARN", "driver weird is not among them"),
    ("25.3.rc1", "8.3.RC1", "SKIP", "versions reported, not judged"),
    (None, "8.5.0", "SKIP", "no driver version.info"),
])
def test_driver_judged_only_where_the_pairing_is_documented(driver, cann, verdict, words):
    check = check_driver_cann(DriverVersions(driver=driver, firmware="7.7.0.1.231", cann=cann), applies=True)
    assert check.verdict == verdict and words in check.reason
    if driver and cann:
        assert f"driver {driver}" in check.reason and f"CANN {cann}" in check.reason


def test_unreadable_version_file_is_named(tmp_path):
    root = build_tree(tmp_path)
    path = root / "usr/local/Ascend/driver/version.info"
    path.chmod(0)
    try:
        if _readable(path):
            pytest.skip("running as root: every file is readable")
        versions = read_driver_versions(root, "8.5.0")
        check = check_driver_cann(versions, applies=True)
        assert check.verdict == "WARN" and str(path) in check.reason
    finally:
        path.chmod(0o644)


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
    except PermissionError:
        return False
    return True


def test_an_empty_driver_version_file_is_named(tmp_path):
    root = build_tree(tmp_path, driver="")
    versions = read_driver_versions(root, "8.5.0")
    check = check_driver_cann(versions, applies=True)
    assert check.verdict == "SKIP" and "version.info has no Version= line" in check.reason, check
    assert "no driver version.info" not in check.reason and "driver unknown" in check.reason
