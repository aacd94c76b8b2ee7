"""The container checks of stage 01 on trees laid out as ``docker run`` leaves them: card
nodes from the Ascend Docker Runtime's variables, control nodes, mounts, /dev/shm."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from hyport_lib.environment import stage
from hyport_lib.environment.compat import check_driver_cann
from hyport_lib.environment.container import Item, check_container, locate, needed_cards, parse_card_list
from hyport_lib.devices.ascend_versions import read_driver_versions
from hyport_lib.environment.params import Params


#: A 24.1.rc3 driver and its firmware, as `cat version.info` printed them in a public
#: MindIE deployment note (Atlas 800I A2).
DRIVER_24_1_RC3 = """Version=24.1.rc3
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C19SPC001B124
compatible_version=[V100R001C13],[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]
compatible_version_fw=[7.0.0,7.5.99]
package_version=24.1.rc3
"""

FIRMWARE_7_5 = """Version=7.5.0.1.129
firmware_version=1.0
package_version=24.1.rc3
compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]
"""

#: An Ascend HDK 25.0.RC1.1 pair, the same shape.
DRIVER_25_0 = DRIVER_24_1_RC3.replace("24.1.rc3", "25.0.rc1.1").replace(
    "C19SPC001B124", "C21SPC002B220").replace("7.5.99", "7.7.99")

FIRMWARE_7_7 = FIRMWARE_7_5.replace("7.5.0.1.129", "7.7.0.1.231").replace(
    "24.1.rc3", "25.0.rc1.1").replace("[24.1,24.1.]", "[24.1,24.1.],[25.0,25.0.]")

#: CANN 8.5.0's install info, as Huawei's log-collection guide shows it.
CANN_850_INFO = """package_name=Ascend-cann-toolkit
version=8.5.0
innerversion=V100R001C25SPC001B212
compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]
arch=x86_64
os=linux
path=/usr/local/Ascend/cann-8.5.0/x86_64-linux
"""

#: /proc/mounts lines of a container started with --shm-size=256g, and of docker's default.
MOUNTS_256G = "overlay / overlay rw,relatime 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=268435456k 0 0\n"

MOUNTS_DOCKER_DEFAULT = "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n"

DRIVER_FLAG = "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver"


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def build_tree(base: Path, *, cards: int = 8, omit: tuple[str, ...] = (), container: bool = True,
               mounts: str = MOUNTS_256G, driver: str = DRIVER_25_0, firmware: str = FIRMWARE_7_7,
               cann: str = CANN_850_INFO) -> Path:
    """A container's view as ``docker run`` with the manual's flags leaves it, less ``omit``
    (paths as inside the container; a folder omitted takes its files with it)."""
    root = base / "tree"
    files = {f"/dev/davinci{n}": "" for n in range(cards)}
    files.update({"/dev/davinci_manager": "", "/dev/devmm_svm": "", "/dev/hisi_hdc": "",
                  "/usr/local/dcmi/libdcmi.so": "", "/usr/local/sbin/npu-smi": "#!/bin/sh\n",
                  "/usr/slog/.keep": "",
                  "/usr/local/Ascend/driver/version.info": driver,
                  "/usr/local/Ascend/driver/lib64/libascend_hal.so": "",
                  "/usr/local/Ascend/firmware/version.info": firmware,
                  "/usr/local/Ascend/cann/x86_64-linux/ascend_toolkit_install.info": cann,
                  "/proc/mounts": mounts})
    if container:
        files["/.dockerenv"] = ""
    for path, text in files.items():
        if not any(path == o or path.startswith(o.rstrip("/") + "/") for o in omit):
            _write(root / path.lstrip("/"), text)
    return root


def _run(root: Path, **values):
    """Stage 01 planned and run as the notebook does, on the tree; the CPU backend here."""
    params = Params(device="cpu", check_ports=False, host_root=str(root), **values)
    return stage.run(stage.plan(params))


def _judge(root: Path, *, num_cards=8, kind="npu", environ=None, listed=None, per_card=1.0):
    versions = read_driver_versions(root, "8.5.0")
    return check_container(root, kind=kind, requested=kind, num_cards=num_cards, environ=environ or {},
                           listed=listed, versions=versions, shm_gb_per_card=per_card)


def _by_name(checks):
    return {c.name: c for c in checks}


def test_missing_card_node_and_driver_mount_fail_with_their_flags(tmp_path):
    root = build_tree(tmp_path, omit=("/dev/davinci3", "/usr/local/Ascend/driver"))
    report = _run(root, num_cards=8)
    checks = _by_name(report.checks)
    devices, mounts = checks["container_devices"], checks["container_mounts"]
    assert devices.verdict == "FAIL" and "/dev/davinci3 missing" in devices.reason
    assert "add --device=/dev/davinci3" in devices.reason
    assert "davinci2" not in devices.reason and "davinci4" not in devices.reason
    assert mounts.verdict == "FAIL" and f"add {DRIVER_FLAG}" in mounts.reason
    assert "version.info" not in mounts.reason  # the folder is the gap, not its file too
    assert stage.summarize(report).verdict == "FAIL"
    assert report.container.flags == ["--device=/dev/davinci3", DRIVER_FLAG]
    text = stage.report_text(report)
    assert f"- docker run flags to add: --device=/dev/davinci3 {DRIVER_FLAG}" in text
    assert [m["path"] for m in report.container.missing] == ["/dev/davinci3", "/usr/local/Ascend/driver"]


def test_a_complete_tree_passes_every_container_check(tmp_path):
    root = build_tree(tmp_path)
    report = _run(root, num_cards=8)
    checks = _by_name(report.checks)
    for name in ("container_devices", "container_mounts", "container_shm", "driver_cann_compat"):
        assert checks[name].verdict == "PASS", checks[name]
    assert "/dev/davinci7" in checks["container_devices"].reason
    assert "256 GiB, 8 GiB needed for 8 cards" in checks["container_shm"].reason
    assert "Ascend HDK 25.0.X" in checks["driver_cann_compat"].reason
    assert report.container.flags == [] and report.container.missing == []
    assert report.container.versions.firmware == "7.7.0.1.231"
    assert report.container.evidence == "/.dockerenv"


def test_outside_a_container_the_checks_do_not_apply_but_versions_are_read(tmp_path):
    root = build_tree(tmp_path, container=False, omit=("/dev/davinci3",), driver=DRIVER_24_1_RC3,
                      firmware=FIRMWARE_7_5)
    report = _run(root, num_cards=8)
    checks = _by_name(report.checks)
    for name in ("container_devices", "container_mounts", "container_shm"):
        assert checks[name].verdict == "SKIP" and "not a container" in checks[name].reason
    assert report.container.in_container is False and report.container.flags == []
    assert report.container.versions.driver == "24.1.rc3"
    assert report.container.versions.firmware == "7.5.0.1.129"
    # CANN 8.5.0 is documented with HDK 25.x only: a 24.1 driver is named, with the source
    compat = checks["driver_cann_compat"]
    assert compat.verdict == "FAIL" and "25.5.X, 25.3.X, 25.2.X, 25.0.X" in compat.reason
    assert "release notes" in compat.reason


def test_a_container_without_ascend_skips_on_cpu(tmp_path):
    root = tmp_path / "plain"
    _write(root / ".dockerenv")
    findings = check_container(root, kind="cpu", requested="cpu", num_cards=2, environ={}, listed=None,
                               versions=read_driver_versions(root), shm_gb_per_card=1.0)
    assert {c.verdict for c in findings.checks} == {"SKIP"} and not findings.judged
    assert "nothing to check for the cpu backend" in findings.checks[0].reason
    assert check_driver_cann(findings.versions, applies=False).verdict == "SKIP"


def test_an_ascend_tree_is_judged_on_cpu_before_torch_npu_is_installed(tmp_path):
    findings = _judge(build_tree(tmp_path, omit=("/dev/hisi_hdc",)), kind="cpu")
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "FAIL" and "--device=/dev/hisi_hdc" in devices.reason
    assert "though the backend is cpu" in devices.reason


@pytest.mark.parametrize("omit, check, verdict, flag", [
    ("/dev/davinci_manager", "container_devices", "FAIL", "--device=/dev/davinci_manager"),
    ("/dev/devmm_svm", "container_devices", "FAIL", "--device=/dev/devmm_svm"),
    ("/dev/hisi_hdc", "container_devices", "FAIL", "--device=/dev/hisi_hdc"),
    ("/dev/davinci0", "container_devices", "FAIL", "--device=/dev/davinci0"),
    ("/usr/local/dcmi", "container_mounts", "WARN", "-v /usr/local/dcmi:/usr/local/dcmi"),
    ("/usr/local/sbin/npu-smi", "container_mounts", "WARN",
     "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi"),
    ("/usr/slog", "container_mounts", "WARN", "-v /var/log/npu/:/usr/slog"),
    ("/usr/local/Ascend/driver/version.info", "container_mounts", "WARN", DRIVER_FLAG),
    ("/usr/local/Ascend/driver", "container_mounts", "FAIL", DRIVER_FLAG),
])
def test_each_missing_item_gives_its_own_flag(tmp_path, omit, check, verdict, flag):
    findings = _judge(build_tree(tmp_path, omit=(omit,)))
    checks = _by_name(findings.checks)
    assert checks[check].verdict == verdict and f"{omit} missing" in checks[check].reason
    assert f"add {flag}" in checks[check].reason
    assert findings.flags == [flag]
    other = "container_mounts" if check == "container_devices" else "container_devices"
    assert checks[other].verdict == "PASS"


def test_npu_smi_without_the_driver_names_the_manuals_rule(tmp_path):
    findings = _judge(build_tree(tmp_path, omit=("/usr/local/Ascend/driver",)))
    assert "mounts the driver and npu-smi together" in _by_name(findings.checks)["container_mounts"].reason


def test_a_small_shm_in_the_tree_gives_the_flag_for_the_cards(tmp_path):
    findings = _judge(build_tree(tmp_path, mounts=MOUNTS_DOCKER_DEFAULT), num_cards=8)
    shm = _by_name(findings.checks)["container_shm"]
    assert shm.verdict == "WARN" and "0.0625 GiB < 8 GiB needed for 8 cards" in shm.reason
    assert "--shm-size=8g" in shm.reason and findings.flags == ["--shm-size=8g"]
    unknown = _judge(build_tree(tmp_path / "b", mounts="overlay / overlay rw 0 0\n"))
    assert _by_name(unknown.checks)["container_shm"].verdict == "SKIP"


@pytest.mark.parametrize("num_cards, environ, listed, cards", [
    (8, {}, None, list(range(8))),
    (None, {"ASCEND_VISIBLE_DEVICES": "0-3"}, None, [0, 1, 2, 3]),
    (None, {"ASCEND_VISIBLE_DEVICES": "4-7", "ASCEND_RT_VISIBLE_DEVICES": "0,1"}, None, [4, 5]),
    (2, {}, [4, 5, 6, 7], [4, 5]),
    (None, {"ASCEND_RT_VISIBLE_DEVICES": "1,3"}, [4, 5, 6, 7], [5, 7]),
    (None, {"ASCEND_RT_VISIBLE_DEVICES": "2,3"}, None, [2, 3]),
    (None, {}, None, []),
])
def test_needed_cards(num_cards, environ, listed, cards):
    assert needed_cards(num_cards, environ, listed).cards == cards


def test_a_bad_host_variable_is_named():
    assert parse_card_list("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(ValueError, match="ASCEND_VISIBLE_DEVICES='0,a'.*'a'"):
        parse_card_list("0,a")


def test_the_visible_devices_variable_picks_the_nodes(tmp_path):
    root = build_tree(tmp_path, cards=4)  # davinci0-3 mounted
    findings = _judge(root, num_cards=None, environ={"ASCEND_VISIBLE_DEVICES": "2-5"})
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "FAIL" and findings.flags == ["--device=/dev/davinci4", "--device=/dev/davinci5"]
    assert "ASCEND_VISIBLE_DEVICES=2-5" in devices.reason


def test_under_the_machine_root_a_node_must_be_a_character_device():
    root = Path("/")
    assert locate(root, Item("/dev/null", "--device=/dev/null", "a node", kind="node"))[1] is None
    plain_file = str(Path(__file__).resolve())
    assert locate(root, Item(plain_file, "", "a node", kind="node"))[1] == "not a character device"
    assert locate(root, Item("/dev/davinci_no_such", "", "a node", kind="node"))[1] == "missing"


def _tree_with_cards(base: Path, cards: tuple[int, ...], **kwargs) -> Path:
    """A complete tree whose only card nodes are ``cards`` (``docker run --device=...`` for each)."""
    root = build_tree(base, cards=0, **kwargs)
    for card in cards:
        _write(root / f"dev/davinci{card}")
    return root


def test_npu_smi_in_usr_local_bin_is_accepted(tmp_path):
    # vLLM Ascend's docker run line mounts -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi
    root = build_tree(tmp_path, omit=("/usr/local/sbin/npu-smi",))
    _write(root / "usr/local/bin/npu-smi", "#!/bin/sh\n")
    findings = _judge(root)
    mounts = _by_name(findings.checks)["container_mounts"]
    assert mounts.verdict == "PASS", mounts
    assert "npu-smi found at /usr/local/bin/npu-smi" in mounts.reason
    assert findings.flags == [] and findings.missing == []


def test_links_in_a_copied_tree_are_followed_inside_the_tree(tmp_path):
    """npu-smi as the host installs it: a link to the driver's tools, absolute. Read under
    --host-root, the target is the tree's file, not this machine's (review D8)."""
    root = build_tree(tmp_path, omit=("/usr/local/sbin/npu-smi",))
    _write(root / "usr/local/Ascend/driver/tools/npu-smi", "#!/bin/sh\n")
    (root / "usr/local/sbin").mkdir(parents=True, exist_ok=True)
    link = root / "usr/local/sbin/npu-smi"
    link.symlink_to("/usr/local/Ascend/driver/tools/npu-smi")
    mounts = _by_name(_judge(root).checks)["container_mounts"]
    assert mounts.verdict == "PASS", mounts
    # a target that this machine has but the tree does not: missing in the tree
    link.unlink()
    link.symlink_to("/" + os.path.relpath(sys.executable, "/"))
    mounts = _by_name(_judge(root).checks)["container_mounts"]
    assert mounts.verdict == "WARN" and "/usr/local/sbin/npu-smi missing" in mounts.reason, mounts
    # relative links and .. stay inside too; a loop is named, not followed forever
    link.unlink()
    link.symlink_to("../../../usr/local/Ascend/driver/tools/npu-smi")
    assert _by_name(_judge(root).checks)["container_mounts"].verdict == "PASS"
    for loop in ("npu-smi", "/usr/local/sbin/npu-smi"):  # relative, and absolute (never this machine's)
        link.unlink()
        link.symlink_to(loop)
        mounts = _by_name(_judge(root).checks)["container_mounts"]
        assert mounts.verdict == "WARN" and "npu-smi cannot be read" in mounts.reason, (loop, mounts)


def _empty_driver(root: Path) -> None:
    (root / "usr/local/Ascend/driver").mkdir(parents=True)


def _driver_is_a_file(root: Path) -> None:
    _write(root / "usr/local/Ascend/driver", "")


def _npu_smi_is_a_folder(root: Path) -> None:
    (root / "usr/local/sbin/npu-smi").mkdir(parents=True)


def _only_version_info(root: Path) -> None:
    _write(root / "usr/local/Ascend/driver/version.info", DRIVER_25_0)


def _empty_lib64(root: Path) -> None:
    """lib64 and version.info mounted one by one (vLLM Ascend's line) from a host whose
    driver lives elsewhere: docker made the missing lib64 source an empty folder."""
    _only_version_info(root)
    (root / "usr/local/Ascend/driver/lib64").mkdir(parents=True)


@pytest.mark.parametrize("omit, make, verdict, words, flag", [
    # only version.info mounted: jobs cannot load libascend_hal.so
    (("/usr/local/Ascend/driver",), _only_version_info, "FAIL",
     "/usr/local/Ascend/driver/lib64 missing (the driver's libraries", DRIVER_FLAG),
    (("/usr/local/Ascend/driver",), _empty_lib64, "FAIL",
     "/usr/local/Ascend/driver/lib64 an empty folder", DRIVER_FLAG),
    # docker made the missing mount source an empty folder
    (("/usr/local/Ascend/driver",), _empty_driver, "FAIL",
     "/usr/local/Ascend/driver an empty folder", DRIVER_FLAG),
    (("/usr/local/Ascend/driver",), _driver_is_a_file, "FAIL", "/usr/local/Ascend/driver not a folder", DRIVER_FLAG),
    (("/usr/local/sbin/npu-smi",), _npu_smi_is_a_folder, "WARN", "/usr/local/sbin/npu-smi a folder, not a file",
     "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi"),
])
def test_mounts_must_be_the_right_kind_of_path(tmp_path, omit, make, verdict, words, flag):
    root = build_tree(tmp_path, omit=omit)
    make(root)
    findings = _judge(root)
    mounts = _by_name(findings.checks)["container_mounts"]
    assert mounts.verdict == verdict and words in mounts.reason, mounts
    assert f"add {flag}" in mounts.reason and findings.flags == [flag]
    assert len(findings.missing) == 1  # an empty or wrong driver folder is one gap, not three


def test_a_container_with_one_other_card_passes(tmp_path):
    # docker run --device=/dev/davinci4 ...: the container's one card is 4, not 0
    findings = _judge(_tree_with_cards(tmp_path, (4,)), num_cards=1)
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "PASS" and "/dev/davinci4" in devices.reason, devices
    assert findings.cards == [4] and findings.flags == []


def test_too_few_card_nodes_fail_with_one_flag_per_missing_card(tmp_path):
    findings = _judge(_tree_with_cards(tmp_path, (4,)), num_cards=3)
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "FAIL" and "3 card nodes needed, 1 present" in devices.reason, devices
    assert findings.flags == ["--device=/dev/davinci0", "--device=/dev/davinci1"]


@pytest.mark.parametrize("node", ["/dev/davinci100", "/dev/vdavinci100"])
def test_a_virtual_npu_is_found_where_the_runtime_puts_it(tmp_path, node):
    # the runtime mounts the host's /dev/vdavinci100 as /dev/davinci100; a privileged
    # container shows the host's name
    root = _tree_with_cards(tmp_path, ())
    _write(root / node.lstrip("/"))
    environ = {"ASCEND_VISIBLE_DEVICES": "100", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
    findings = _judge(root, num_cards=1, environ=environ)
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "PASS", devices
    assert findings.cards == [100] and findings.virtual


def test_a_missing_virtual_npu_names_the_host_node(tmp_path):
    environ = {"ASCEND_VISIBLE_DEVICES": "100", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
    findings = _judge(_tree_with_cards(tmp_path, ()), num_cards=1, environ=environ)
    assert _by_name(findings.checks)["container_devices"].verdict == "FAIL"
    assert findings.flags == ["--device=/dev/vdavinci100:/dev/davinci100"]


def test_a_vnpu_cut_at_start_is_judged_by_the_nodes_present(tmp_path):
    # ASCEND_VNPU_SPECS: the runtime mounts the vNPU under the ID it creates, not card 0
    environ = {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_VNPU_SPECS": "vir04", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
    findings = _judge(_tree_with_cards(tmp_path, (100,)), num_cards=1, environ=environ)
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "PASS" and findings.cards == [100], devices
    assert "ASCEND_VNPU_SPECS=vir04" in devices.reason


@pytest.mark.parametrize("value", ["void", ""])
def test_no_npu_asked_skips_the_container_checks(tmp_path, value):
    findings = _judge(_tree_with_cards(tmp_path, ()), environ={"ASCEND_VISIBLE_DEVICES": value})
    for check in findings.checks:
        assert check.verdict == "SKIP" and "mount no NPU" in check.reason, check
    assert findings.flags == []


def test_no_npu_asked_still_judges_cards_added_by_hand(tmp_path):
    root = _tree_with_cards(tmp_path, (2,), omit=("/dev/hisi_hdc",))
    findings = _judge(root, num_cards=1, environ={"ASCEND_VISIBLE_DEVICES": "void"})
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "FAIL" and findings.cards == [2]
    assert findings.flags == ["--device=/dev/hisi_hdc"]


def test_chip_names_name_their_cards(tmp_path):
    root = build_tree(tmp_path, cards=2)
    findings = _judge(root, num_cards=None, environ={"ASCEND_VISIBLE_DEVICES": "Ascend910-0,Ascend910-1"})
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "PASS" and findings.cards == [0, 1], devices
    assert parse_card_list("Ascend310P-3, Ascend310P-1") == [1, 3]
    with pytest.raises(ValueError, match="2 types"):
        parse_card_list("Ascend910-0,Ascend310-1")
    with pytest.raises(ValueError, match="'1' is not a chip name"):
        parse_card_list("Ascend910-0,1")


def test_host_variable_read_as_the_runtime_reads_it(tmp_path):
    assert parse_card_list("3,1,1-2") == [1, 2, 3]  # sorted, each once
    with pytest.raises(ValueError, match="runs backwards"):
        parse_card_list("3-1")
    # a backwards range named, not read as "no cards"
    findings = _judge(build_tree(tmp_path, cards=2), num_cards=None, environ={"ASCEND_VISIBLE_DEVICES": "3-1"})
    devices = _by_name(findings.checks)["container_devices"]
    assert devices.verdict == "WARN" and "range '3-1' runs backwards" in devices.reason, devices


def test_a_huge_range_is_refused_at_once(tmp_path):
    root = build_tree(tmp_path, cards=2)
    started = time.perf_counter()
    findings = _judge(root, num_cards=None, environ={"ASCEND_VISIBLE_DEVICES": "0-50000"})
    elapsed = time.perf_counter() - started
    devices = _by_name(findings.checks)["container_devices"]
    assert elapsed < 2.0, f"{elapsed:.1f} s"
    assert devices.verdict == "WARN" and "ends above 128" in devices.reason, devices
    assert findings.cards == [0, 1]  # the variable is ignored: the nodes present are judged
