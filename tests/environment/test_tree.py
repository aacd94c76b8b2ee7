"""Stage 01 on a hostile copied tree (``hyport env --host-root TREE``, issue 29).

A tree may hold a FIFO or a device node where a file belongs, a file far larger than its
kind ever is, or an absolute link that names a path of the container, which this machine
may also have. Each is read as the tree's and refused in one line naming it: never a hang,
never an endless read, never this machine's file.

What a tree's files (and the model's and accelerate's configs) put in the report is shown
without terminal escapes or secrets; a config nested without end, or expanding through YAML
aliases, is named, not a crash or an endless walk.

The trees come from :func:`test_container.build_tree`. A test that would hang on a
regression runs under :func:`_guarded`, so it fails instead of blocking the suite or
filling its memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import stat
from pathlib import Path

import pytest
from .test_container import CANN_850_INFO, DRIVER_25_0, _by_name, _judge, _run, _write, build_tree

from hyport_lib.environment import facts, stage
from hyport_lib.environment.checks import check_video_processors
from hyport_lib.environment.container import ascend_signs
from hyport_lib.devices.ascend_versions import collect_cann, read_driver_versions
from hyport_lib.utils.file_tree import MAX_PROC_BYTES, MAX_VERSION_BYTES
from hyport_lib.models.loading import torchvision_problem
from hyport_lib.utils.files import dumps_json

DRIVER_VERSION = "usr/local/Ascend/driver/version.info"
CANN_INFO = "usr/local/Ascend/cann/x86_64-linux/ascend_toolkit_install.info"
ESCAPES = "\x1b]0;PWNED\x07\x1b[2J"


class Blocked(BaseException):
    """The body blocked: a BaseException, so that no ``except OSError`` / ``except
    Exception`` of the code under test takes it for a read error and blocks again."""


#: Address space the guarded body may add: a read that never ends (a device node) then
#: fails with MemoryError in seconds instead of taking the shared machine's memory.
MEMORY_HEADROOM = 4 << 30


@contextlib.contextmanager
def _guarded(seconds: float = 20):
    """Fail the test when its body blocks (an ``open`` of a FIFO waits for a writer; the
    alarm is re-fired every second until the body gives up) or reads without end."""
    def expire(signum, frame):
        raise Blocked(f"blocked for more than {seconds} s")

    limits = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(re.search(r"^VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024
    ceiling = in_use + MEMORY_HEADROOM
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    if limits[0] == resource.RLIM_INFINITY or ceiling < limits[0]:
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _zero_device(path: Path) -> None:
    """A character device 1,5 (what ``cp -a /dev/zero`` leaves): a file that never ends."""
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("device nodes cannot be made here (not root)")


def _not_a_container_by_marker(root: Path) -> None:
    (root / ".dockerenv").unlink()


def _cgroup_v2_without_runtime(root: Path) -> None:
    """What a cgroup v2 pod shows: /proc/1/cgroup names no runtime, mountinfo decides."""
    (root / ".dockerenv").unlink()
    _write(root / "proc/1/cgroup", "0::/\n")


#: Each place a FIFO blocked `hyport env --host-root` for ever: (the file, how the tree must
#: look for it to be read, the checks that must then name it, with their verdict).
PLACES = [
    pytest.param("proc/1/cgroup", _not_a_container_by_marker, {"container_devices": "WARN"}, id="cgroup"),
    pytest.param("proc/1/mountinfo", _cgroup_v2_without_runtime, {"container_devices": "WARN"}, id="mountinfo"),
    pytest.param("proc/mounts", None, {"container_shm": "WARN"}, id="mounts"),
    pytest.param(DRIVER_VERSION, None, {"container_mounts": "WARN", "driver_cann_compat": "WARN"},
                 id="driver-version"),
]


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO (named pipe)"), (_zero_device, "a device node")],
                         ids=["fifo", "device"])
@pytest.mark.parametrize("place, prepare, named", PLACES)
def test_a_fifo_or_device_node_in_the_tree_is_named_not_read(tmp_path, place, prepare, named, make, kind):
    root = build_tree(tmp_path)
    if prepare is not None:
        prepare(root)
    make(root / place)
    with _guarded():
        report = _run(root, num_cards=8)
    checks = _by_name(report.checks)
    line = f"{root / place}: cannot be read: {kind}, not a regular file"
    for name, verdict in named.items():
        assert checks[name].verdict == verdict and (line in checks[name].reason
                                                    or f"/{place} {kind}" in checks[name].reason), checks[name]
    assert line in stage.report_text(report)  # the container facts list it too


@pytest.mark.parametrize("make", [_fifo, _zero_device], ids=["fifo", "device"])
def test_a_fifo_or_device_node_as_the_cann_info_is_named(tmp_path, make):
    root = build_tree(tmp_path)
    make(root / CANN_INFO)
    with _guarded():
        cann = collect_cann({}, root, arch="x86_64")
        versions = read_driver_versions(root, cann.version, tuple(cann.refused))
    assert cann.version is None and len(cann.refused) == 1
    assert cann.refused[0].startswith(f"{root / CANN_INFO}: cannot be read: ")
    assert versions.errors == cann.refused


def test_the_command_judges_a_tree_of_fifos_and_exits_as_for_any_bad_tree(tmp_path, capsys):
    from hyport_lib.commands import main

    root = build_tree(tmp_path, omit=("/dev/davinci3",))
    for place in ("proc/mounts", DRIVER_VERSION):
        _fifo(root / place)
    with _guarded():
        code = main(["env", "--device", "cpu", "--num-cards", "8", "--check-ports", "false",
                     "--host-root", str(root), "--no-record"])
    out = capsys.readouterr().out
    assert code == 1 and "[FAIL] container_devices" in out  # the missing card, as before
    assert f"[WARN] container_shm: {root / 'proc/mounts'}: cannot be read: a FIFO" in out
    assert f"[WARN] driver_cann_compat: {root / DRIVER_VERSION}: cannot be read: a FIFO" in out


# --- links: the tree's path, never this machine's ----------------------------------------------
def test_a_link_to_dev_zero_is_the_trees_dev_zero(tmp_path):
    """``version.info -> /dev/zero`` means the tree's /dev/zero: absent in the tree, and
    when the tree holds a file there, that file; this machine's endless /dev/zero never."""
    root = build_tree(tmp_path)
    (root / DRIVER_VERSION).unlink()
    (root / DRIVER_VERSION).symlink_to("/dev/zero")
    with _guarded():
        cann = collect_cann({}, root, arch="x86_64")
        versions = read_driver_versions(root, cann.version)
        mounts = _by_name(_judge(root).checks)["container_mounts"]
    assert cann.driver_version is None and cann.refused == []
    assert versions.driver is None and versions.driver_file is None and versions.errors == []
    assert mounts.verdict == "WARN" and "/usr/local/Ascend/driver/version.info missing" in mounts.reason
    _write(root / "dev/zero", DRIVER_25_0)  # the tree's own /dev/zero, a plain file
    assert collect_cann({}, root, arch="x86_64").driver_version == "25.0.rc1.1"
    assert read_driver_versions(root).driver_file == str(root / "dev/zero")


def _machine_toolkit(tmp_path: Path) -> Path:
    """A toolkit folder of THIS machine holding another CANN (7.0.0) and its set_env.sh."""
    folder = tmp_path / "machine-toolkit"
    _write(folder / "x86_64-linux/ascend_toolkit_install.info", CANN_850_INFO.replace("8.5.0", "7.0.0"))
    _write(folder / "set_env.sh", "export ASCEND_HOME_PATH=...\n")
    return folder


def test_an_absolute_link_to_this_machines_toolkit_is_the_trees_path(tmp_path):
    """``ascend-toolkit/latest -> /abs/path`` names the tree's /abs/path: this machine's
    CANN there must not be reported as the tree's (issue 29, defect 3)."""
    machine = _machine_toolkit(tmp_path)
    root = build_tree(tmp_path, omit=("/usr/local/Ascend/cann",))
    toolkit = root / "usr/local/Ascend/ascend-toolkit"
    toolkit.mkdir(parents=True)
    (toolkit / "latest").symlink_to(machine)
    (toolkit / "set_env.sh").symlink_to(machine / "set_env.sh")
    cann = collect_cann({}, root, arch="x86_64")
    assert cann.version is None and cann.info_file is None and cann.set_env is None, cann
    report = _run(root, num_cards=8)
    assert report.container.versions.cann is None
    assert "CANN not found" in _by_name(report.checks)["driver_cann_compat"].reason
    # the same path inside the tree is the one read
    _write(root / str(machine).lstrip("/") / "x86_64-linux/ascend_toolkit_install.info", CANN_850_INFO)
    assert collect_cann({}, root, arch="x86_64").version == "8.5.0"


def test_the_toolkit_variables_and_their_links_stay_in_the_tree(tmp_path):
    """ASCEND_HOME_PATH names a path of the tree, and a link below it stays in the tree."""
    machine = _machine_toolkit(tmp_path)
    root = build_tree(tmp_path, omit=("/usr/local/Ascend/cann",))
    assert collect_cann({"ASCEND_HOME_PATH": str(machine)}, root, arch="x86_64").version is None
    (root / "opt/cann").mkdir(parents=True)
    (root / "opt/cann/x86_64-linux").symlink_to(machine / "x86_64-linux")
    assert collect_cann({"ASCEND_HOME_PATH": "/opt/cann"}, root, arch="x86_64").version is None


# --- bounds ----------------------------------------------------------------------------------------
def test_a_version_file_larger_than_its_kind_is_refused_in_one_line(tmp_path):
    root = build_tree(tmp_path)
    _write(root / DRIVER_VERSION, DRIVER_25_0 + "#" * MAX_VERSION_BYTES)
    versions = read_driver_versions(root, "8.5.0")
    assert versions.driver is None and versions.errors == [
        f"{root / DRIVER_VERSION}: cannot be read: larger than 64 KiB, the most hyport reads of such a file"]


def test_a_proc_mounts_larger_than_a_proc_file_is_named(tmp_path):
    root = build_tree(tmp_path, mounts="x" * (MAX_PROC_BYTES + 1))
    shm = _by_name(_judge(root).checks)["container_shm"]
    assert shm.verdict == "WARN" and f"{root / 'proc/mounts'}: cannot be read: larger than 1 MiB" in shm.reason


def test_an_accelerate_config_that_is_a_fifo_is_named(tmp_path, monkeypatch):
    config = tmp_path / "default_config.yaml"
    os.mkfifo(config)
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(config))
    with _guarded():
        found = facts._accelerate_config()
    assert found == {"path": str(config),
                     "error": f"{config}: cannot be read: a FIFO (named pipe), not a regular file"}


# --------------------------------------------------------------------------- escapes and secrets shown
def _report_texts(report) -> tuple[str, str]:
    return stage.report_text(report), dumps_json(stage.result_data(report))


def test_a_version_file_with_escapes_and_secrets_shows_neither(tmp_path):
    root = build_tree(tmp_path)
    (root / DRIVER_VERSION).write_text(
        f"Version=25.0.rc1.1{ESCAPES}\npackage_version=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
        "Innerversion=password=hunter2xyz\n"
        "compatible_version_fw=Authorization: Bearer sk-abcdef0123456789abcdef\n")
    text, data = _report_texts(_run(root))
    for shown in (text, data, json.loads(data)["container"]["versions"]["driver"]):
        assert "\x1b" not in shown and "\x07" not in shown
    for secret in ("ghp_abcdefghijklmnopqrstuvwxyz", "hunter2xyz", "sk-abcdef0123456789"):
        assert secret not in text and secret not in data, secret


def test_a_card_node_named_with_escapes_is_shown_without_them(tmp_path):
    root = build_tree(tmp_path, cards=0, omit=("/usr/local/Ascend", "/dev/davinci_manager"))
    (root / f"dev/davinci0{ESCAPES}").write_text("")
    assert all("\x1b" not in sign for sign in ascend_signs(root))
    text, data = _report_texts(_run(root))
    assert "\x1b" not in text and "\\u001b" not in data


def test_a_refused_path_with_escapes_is_named_without_them(tmp_path):
    root = build_tree(tmp_path)
    (root / DRIVER_VERSION).unlink()
    (root / DRIVER_VERSION).symlink_to(f"loop{ESCAPES}")
    (root / f"usr/local/Ascend/driver/loop{ESCAPES}").symlink_to(f"loop{ESCAPES}")
    text, data = _report_texts(_run(root))
    assert "a link loop" in text
    assert "\x1b" not in text and "\\u001b" not in data


def test_a_model_config_nested_without_end_is_no_traceback(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    report = _run(build_tree(tmp_path), model_path=str(model))
    # Whether this model wants a video processor cannot be told: the check says neither
    # that it has a video part nor that it has none.
    assert report.check("video_processors") == check_video_processors(
        report.versions.get("transformers"), torchvision_problem(), "", None)


def test_a_model_type_with_escapes_is_shown_without_them(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": f"llava{ESCAPES}"}))
    text, data = _report_texts(_run(build_tree(tmp_path), model_path=str(model)))
    assert "\x1b" not in text and "\\u001b" not in data


def _accelerate(tmp_path, monkeypatch, text: str):
    path = tmp_path / "default_config.yaml"
    path.write_text(text)
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(path))
    return facts._accelerate_config()


def test_an_accelerate_config_keeps_no_nested_secret_nor_escape(tmp_path, monkeypatch):
    config = _accelerate(tmp_path, monkeypatch,
                         "compute_environment: LOCAL_MACHINE\nfsdp_config:\n"
                         "  hub_token: hf_abcdefghijklmnopqrstuvwxyzABCD\n  note: \"\\e]0;PWNED\\a\"\n"
                         "extra: password=hunter2xyz\nmain_process_ip: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n")
    shown = dumps_json(config)
    assert config["compute_environment"] == "LOCAL_MACHINE"
    assert "hub_token" not in config["fsdp_config"]
    for secret in ("hf_abcdefghijklmnopqrstuvwxyz", "hunter2xyz", "ghp_abcdefghijklmnopqrstuvwxyz", "\\u001b"):
        assert secret not in shown, secret


def test_an_accelerate_config_of_nested_aliases_is_refused_not_expanded(tmp_path, monkeypatch):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    config = _accelerate(tmp_path, monkeypatch, "\n".join(lines) + "\n")
    assert set(config) == {"path", "error"} and "default_config.yaml" in config["error"]


def test_an_accelerate_config_nested_without_end_is_refused(tmp_path, monkeypatch):
    config = _accelerate(tmp_path, monkeypatch, "[" * 200_000 + "]" * 200_000)
    assert set(config) == {"path", "error"} and "default_config.yaml" in config["error"]
