"""The host's facts: CANN found in its layouts, the version files, container evidence, the
variables shown with secret-named ones dropped."""

from __future__ import annotations

import pytest

from hyport_lib.environment import checks as C
from hyport_lib.environment.compat import hdk_release
from hyport_lib.devices.ascend_versions import collect_cann, parse_version_info, read_driver_versions
from hyport_lib.environment.facts import collect_env_vars, container_evidence

from .test_container import DRIVER_24_1_RC3, DRIVER_25_0, FIRMWARE_7_5, _by_name, _judge, _write, build_tree


SECRETS = {"HCCL_AUTH_TOKEN": "tok-1234567", "ASCEND_ACCESS_KEY": "ak-7654321",
           "NCCL_PASSWORD": "pw-abcdefg", "DS_SECRET": "sec-9999999", "MASTER_CREDENTIAL": "cred-8888"}


def test_collect_env_vars_drops_secret_names():
    env = {**SECRETS, "HCCL_CONNECT_TIMEOUT": "600", "HOME": "/root", "TASK_QUEUE_ENABLE": "2",
           "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "HF_TOKEN": "hf_xyz"}
    assert collect_env_vars(env) == {"HCCL_CONNECT_TIMEOUT": "600", "PYTORCH_NPU_ALLOC_CONF":
                                     "expandable_segments:True", "TASK_QUEUE_ENABLE": "2"}


def test_collect_cann_toolkit_layout(tmp_path):
    info = _write(tmp_path / "ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
                  "package_name=Ascend-cann-toolkit\nversion=8.2.RC1\narch=aarch64\n")
    set_env = _write(tmp_path / "ascend-toolkit/set_env.sh", "export ASCEND_HOME_PATH=...\n")
    _write(tmp_path / "driver/version.info", "Version=24.1.rc2\nascendhal_version=7.35.23\n")
    cann = collect_cann({}, ascend_root=tmp_path, arch="aarch64")
    assert cann.version == "8.2.RC1" and cann.info_file == str(info)
    assert cann.set_env == str(set_env) and cann.driver_version == "24.1.rc2"
    check = C.check_cann_env("npu", cann, environ={})
    assert check.verdict == "WARN" and f"source {set_env}" in check.reason
    sourced = C.check_cann_env("npu", cann, environ={"ASCEND_HOME_PATH": str(info.parent.parent)})
    assert sourced.verdict == "PASS"


def test_collect_cann_85_layout(tmp_path):
    _write(tmp_path / "cann/x86_64-linux/ascend_toolkit_install.info", "version=8.5.0\n")
    _write(tmp_path / "cann/set_env.sh", "")
    cann = collect_cann({}, ascend_root=tmp_path, arch="x86_64")
    assert cann.version == "8.5.0" and cann.set_env.endswith("cann/set_env.sh")


def test_no_cann_is_skip_on_cpu(tmp_path):
    cann = collect_cann({}, ascend_root=tmp_path, arch="x86_64")
    assert cann.version is None and cann.set_env is None
    assert C.check_cann_env("cpu", cann, {}).verdict == "SKIP"


def test_container_evidence_is_read_under_the_root(tmp_path):
    assert container_evidence(tmp_path) is None
    _write(tmp_path / "proc/1/cgroup", "12:memory:/kubepods/burstable/pod1234/abcd\n")
    assert container_evidence(tmp_path) == "/proc/1/cgroup names kubepods"
    _write(tmp_path / "run/.containerenv")
    assert container_evidence(tmp_path) == "/run/.containerenv"


HOST_MOUNTINFO = "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"

POD_MOUNTINFO = ("1380 1228 0:301 / / rw,relatime master:420 - overlay overlay rw,lowerdir=/var/lib/"
                 "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs,upperdir=/x,workdir=/y\n"
                 "1381 1380 0:303 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n")


@pytest.mark.parametrize("files, evidence", [
    ({"proc/1/cgroup": "0::/\n", "proc/1/mountinfo": HOST_MOUNTINFO}, None),
    # a Kubernetes pod on containerd with cgroup v2: no marker file, 0::/ (review D6)
    ({"proc/1/cgroup": "0::/\n", "proc/1/mountinfo": POD_MOUNTINFO}, "/ is an overlay mount (/proc/1/mountinfo)"),
    ({"proc/1/cgroup": "0::/\n", "var/run/secrets/kubernetes.io/serviceaccount/namespace": "default"},
     "/var/run/secrets/kubernetes.io"),
    # an overlay shadowed by a later mount on / is not the root in effect
    ({"proc/1/mountinfo": POD_MOUNTINFO + HOST_MOUNTINFO}, None),
])
def test_a_pod_on_cgroup_v2_is_a_container(tmp_path, files, evidence):
    for name, text in files.items():
        _write(tmp_path / name, text)
    assert container_evidence(tmp_path) == evidence


def test_version_files_parsed_from_real_contents(tmp_path):
    root = build_tree(tmp_path, driver=DRIVER_24_1_RC3, firmware=FIRMWARE_7_5)
    versions = read_driver_versions(root, "CANN-8.0.rc3")
    assert (versions.driver, versions.driver_package, versions.driver_inner) == \
        ("24.1.rc3", "24.1.rc3", "V100R001C19SPC001B124")
    assert versions.driver_firmware_range == "[7.0.0,7.5.99]"
    assert (versions.firmware, versions.firmware_package) == ("7.5.0.1.129", "24.1.rc3")
    assert versions.firmware_driver_range == "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]"
    assert versions.cann == "8.0.RC3"
    assert parse_version_info("# note\nVersion = 23.0.6\nAPI_TOKEN=x\n") == {"Version": "23.0.6"}
    assert hdk_release("25.0.rc1.1") == "25.0" and hdk_release("25.3.RC1") == "25.3"
    assert hdk_release("unknown") is None


def test_the_version_files_are_read_through_the_trees_links(tmp_path):
    """Review E2: a driver folder that is a link (/usr/local/Ascend/driver -> /opt/driver) is
    the tree's for the version file too, as for the mounts: one report, one answer."""
    root = build_tree(tmp_path, driver=DRIVER_25_0)
    driver = root / "usr/local/Ascend/driver"
    (root / "opt").mkdir()
    driver.rename(root / "opt/driver")
    driver.symlink_to("/opt/driver")
    findings = _judge(root)
    assert _by_name(findings.checks)["container_mounts"].verdict == "PASS"
    assert read_driver_versions(root).driver == "25.0.rc1.1"
    (root / "opt/driver").rename(root / "opt/elsewhere")
    (root / "opt/driver").symlink_to("/usr/local/Ascend/driver")  # a loop through two links
    versions = read_driver_versions(root)
    assert versions.driver is None and "cannot be read" in " ".join(versions.errors), versions
