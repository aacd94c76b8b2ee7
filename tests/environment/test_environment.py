"""Environment check: compatibility table, visible devices, devices via the torch_npu double,
redaction, CANN discovery, checks, report, CLI and notebook; the torch-npu install hint that
keeps the host's torch, the RAM check under a container limit, a broken torch_npu."""

from __future__ import annotations

import json
import socket
import sys
import tomllib
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.commands import main
from hyport_lib.environment.compat import TORCH_NPU_COMPAT, check_cann_compat, check_torch_npu_compat
from hyport_lib.devices.probe import DeviceProcess
from hyport_lib.results import Check
from hyport_lib.environment import stage
from hyport_lib.environment.report import EnvironmentReport
from hyport_lib.environment.params import Params
from hyport_lib.devices.probe import probe_devices
from hyport_lib.devices.visible_devices import check_visible_devices, parse_visible_devices
from hyport_lib.environment.show import checks_frame
from hyport_lib.environment.facts import CannFacts, collect_cann, collect_env_vars
from hyport_lib.utils.imports import clear_import_caches, collect_versions
from hyport_lib.devices import host_memory, visible_devices
from hyport_lib.environment import checks as C
from hyport_lib.environment.compat import releases_for_torch
from hyport_lib.devices.probe import (DeviceListing, parse_nvidia_smi_apps,
                                           parse_nvidia_smi_gpus)
from hyport_lib.environment.show import devices_frame
from hyport_lib.devices.probe import DeviceInfo
from hyport_lib.results import worst_verdict

from conftest import requires_full_stack

REPO = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).parents[1] / "data" / "npu_smi"


def _collect(**values) -> EnvironmentReport:
    """Stage 01 run as the notebook runs it, with these parameters."""
    return stage.run(stage.plan(Params(**values)))


# --- compatibility table ----------------------------------------------------------------------
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


# --- visible devices ---------------------------------------------------------------------------
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
    for kind in {"npu", "cuda", "cpu"} - {own}:
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


def test_env_cli_passes_with_gpus_hidden_on_cpu(capsys, monkeypatch):
    for value in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        code = main(["env", "--device", "cpu", "--no-record"])
        out = capsys.readouterr().out
        assert f"[PASS] visible_devices: CUDA_VISIBLE_DEVICES={value!r}: GPUs hidden" in out
        assert "[FAIL]" not in out and code == 0, out


@pytest.mark.slow
def test_hidden_gpus_on_an_npu_host(fake_npu, npu_smi_sample, monkeypatch):
    npu_smi_sample(_npu_smi_table(4, busy={}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    report = _collect(device="npu", num_cards=2, check_ports=False)
    visible = [c for c in report.checks if c.name == "visible_devices"]
    assert [c.verdict for c in visible] == ["PASS", "SKIP"]  # the NPU variable first
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in visible[0].reason
    assert "GPUs hidden" in visible[1].reason
    assert report.check("busy_cards").verdict == "PASS"


def test_requested_cuda_names_the_hidden_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    report = _collect(device="cuda", check_ports=False)  # no CUDA here: falls back
    assert report.check("backend").verdict == "FAIL"
    check = report.check("visible_devices")
    assert check.verdict == "FAIL" and check.reason.startswith("CUDA_VISIBLE_DEVICES is set but empty")


def _busy(backend) -> dict:
    """Cards that some process holds: ``{logical index: processes}``."""
    return {d.index: d.processes for d in probe_devices(backend).devices if d.processes}


# --- devices through the torch_npu double ----------------------------------------------------
@pytest.mark.slow
def test_list_devices_with_fake_npu(fake_npu, npu_smi_sample):
    npu_smi_sample((SAMPLES / "910b_24x_classic.txt").read_text(encoding="utf-8"))
    backend = get_backend("npu")
    assert backend.kind == "npu"
    devices = probe_devices(backend).devices
    assert [(d.index, d.npu_id, d.name, d.hbm_used_mb) for d in devices] == [
        (0, 0, "910B3", 3318), (1, 1, "910B3", 64021), (2, 2, "910B3", 3320)]
    assert _busy(backend) == {1: [DeviceProcess(pid=576489, name="python", memory_mb=60703)]}
    listing = probe_devices(backend)
    assert (listing.source, listing.error, listing.driver_version) == ("npu-smi", None, "24.1.rc1")


@pytest.mark.slow
def test_a3_busy_card_is_the_logical_index(fake_npu, npu_smi_sample):
    npu_smi_sample((SAMPLES / "a3_two_chips.txt").read_text(encoding="utf-8"))
    assert list(_busy(get_backend("npu"))) == [3]


def _npu_smi_table(cards: int, busy: dict[int, int]) -> str:
    """An ``npu-smi info`` text (24.x layout) for ``cards`` 910B3 chips; ``busy``: card -> pid."""
    rule = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
    lines = ["+" + "-" * 96 + "+", "| npu-smi 24.1.rc1                 Version: 24.1.rc1" + " " * 45 + "|",
             "| NPU   Name                | Health        | Power(W)    Temp(C)           "
             "Hugepages-Usage(page)|",
             "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  "
             "HBM-Usage(MB)        |", rule]
    for i in range(cards):
        used = 60000 if i in busy else 3300
        lines += [f"| {i:<5} 910B3               | OK            | 95.0        40                "
                  f"0    / 0             |",
                  f"| 0                         | 0000:{i:02X}:00.0  | 0           0    / 0          "
                  f"{used:<5}/ 65536         |", rule]
    lines += ["| NPU     Chip              | Process id    | Process name             | "
              "Process memory(MB)      |", rule]
    for i in range(cards):
        if i in busy:
            lines.append(f"| {i:<7} 0                 | {busy[i]:<13} | python                   | "
                         f"56000                   |")
        else:
            lines.append(f"| No running processes found in NPU {i}" + " " * 60 + "|")
        lines.append(rule)
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_busy_cards_judged_among_the_visible_cards(fake_npu, npu_smi_sample, monkeypatch, capsys):
    from hyport_lib.devices.card_plan import plan_grid

    npu_smi_sample(_npu_smi_table(8, busy={4: 4444, 5: 5555}))
    assert _busy(get_backend("npu")) == {4: [DeviceProcess(4444, "python", 56000)],
                                             5: [DeviceProcess(5555, "python", 56000)]}
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    code = main(["env", "--device", "npu", "--num-cards", "2", "--no-record"])
    out = capsys.readouterr().out
    assert code == 1
    assert ("[FAIL] busy_cards: both visible cards (4, 5) are busy (ASCEND_RT_VISIBLE_DEVICES=4,5): "
            "0 free, 2 requested") in out
    # The grid agrees: under that variable it would skip both cards.
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")  # what the runtime shows under it
    assert plan_grid(get_backend("npu"), num_cards=2).to_run == []


@pytest.mark.parametrize("visible, num_cards, verdict, words", [
    ("4,5", 2, "FAIL", ["both visible cards (4, 5) are busy", "0 free, 2 requested"]),
    ("4,5", None, "FAIL", ["both visible cards (4, 5) are busy", "nothing can run"]),
    ("5", 1, "FAIL", ["the only visible card (5) is busy"]),
    ("3,4,5,6", 2, "WARN", ["2 of 4 visible cards (3, 4, 5, 6) busy", "pid 4444", "skips them"]),
    ("3,4,5,6", 3, "FAIL", ["2 of 4 visible cards (3, 4, 5, 6) busy", "2 free, 3 requested"]),
    ("5,6", 2, "FAIL", ["1 of 2 visible cards (5, 6) busy", "1 free, 2 requested",
                        "not visible, so not used: card 4"]),
    ("0,1", 2, "PASS", ["2 visible cards (0, 1)", "not visible, so not used: cards 4, 5"]),
    ("0,1", 3, "FAIL", ["only 2 visible cards (0, 1)", "3 requested"]),
    (None, 2, "WARN", ["2 of 8 cards busy", "pid 5555"]),
    (None, 7, "FAIL", ["6 free, 7 requested"]),
])
@pytest.mark.slow
def test_busy_cards_check_with_a_visible_variable(fake_npu, npu_smi_sample, monkeypatch,
                                                  visible, num_cards, verdict, words):
    npu_smi_sample(_npu_smi_table(8, busy={4: 4444, 5: 5555}))
    if visible is None:
        monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", visible)
    check = _collect(device="npu", num_cards=num_cards, check_ports=False).check("busy_cards")
    assert check.verdict == verdict, check.reason
    for word in words:
        assert word in check.reason, check.reason
    assert (f"(ASCEND_RT_VISIBLE_DEVICES={visible})" in check.reason) == (visible is not None)


def test_busy_cards_when_nothing_visible_maps():
    devices = [DeviceInfo(i, i, 0, "910B3", "OK", 1, 2) for i in range(2)]
    listing = DeviceListing(devices=devices, source="npu-smi")
    assert C.check_busy_cards("npu", listing, 1, visible=[], visible_var="X=").verdict == "SKIP"
    hidden = C.check_busy_cards("npu", listing, 1, visible=[7], visible_var="X=7")
    assert hidden.verdict == "SKIP" and "no card of this host is visible (X=7)" in hidden.reason
    assert C.check_busy_cards("npu", listing, 2, visible=None).verdict == "PASS"


@pytest.mark.slow
def test_npu_smi_failure_falls_back_to_torch(fake_npu, monkeypatch):
    monkeypatch.delenv("HYPORT_FAKE_NPU_SMI_FILE", raising=False)  # the double then exits 2
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")
    listing = probe_devices(get_backend("npu"))
    assert listing.source == "torch" and not listing.processes_known
    assert "exited 2" in listing.error
    assert [(d.index, d.name) for d in listing.devices] == [(0, "Ascend910B3"), (1, "Ascend910B3")]
    assert C.check_busy_cards("npu", listing).verdict == "WARN"


@pytest.mark.slow
def test_collect_environment_on_fake_npu(fake_npu, npu_smi_sample, monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0, 1")
    npu_smi_sample((SAMPLES / "910b_24x_classic.txt").read_text(encoding="utf-8"))
    report = _collect(device="npu", num_cards=2, check_ports=False)
    assert report.device == "npu" and report.device_source == "npu-smi"
    assert report.versions["torch_npu"] == fake_npu.__version__
    got = {c.name: c.verdict for c in report.checks}
    assert got["torch_npu_import"] == "PASS"
    # "0, 1": the runtime sees card 0 only, so 2 requested cannot be met (busy card 1 unused)
    assert got["busy_cards"] == "FAIL"
    assert "only 1 visible card (0)" in report.check("busy_cards").reason
    assert "not visible, so not used: card 1" in report.check("busy_cards").reason
    assert got["card_health"] == "WARN"  # card 2 reports Warning
    assert got["visible_devices"] == "FAIL"  # "0, 1" -> the runtime sees card 0 only
    torch_minor = ".".join(report.versions["torch"].split(".")[:2])
    assert got["torch_npu_compat"] == ("PASS" if torch_minor == "2.8" else "FAIL")
    assert stage.summarize(report).verdict == "FAIL"
    assert report.cann.driver_version == "24.1.rc1"
    assert "pid 576489 python 60703 MB" in stage.report_text(report)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "3")  # the sample's host: 3 cards
    report2 = _collect(device="npu", num_cards=2, check_ports=False)
    busy2 = report2.check("busy_cards")
    assert busy2.verdict == "WARN" and busy2.reason.startswith("1 of 3 cards busy")
    report3 = _collect(device="npu", num_cards=3, check_ports=False)
    assert report3.check("busy_cards").verdict == "FAIL"
    assert "2 free, 3 requested" in report3.check("busy_cards").reason


def test_cpu_pseudo_cards():
    backend = get_backend("cpu", num_cards=3)
    devices = probe_devices(backend).devices
    assert [d.index for d in devices] == [0, 1, 2]
    assert all(d.processes == [] and d.source == "cpu" for d in devices)
    assert _busy(backend) == {}


def test_nvidia_smi_parsers():
    gpus = parse_nvidia_smi_gpus("0, GPU-aaa, NVIDIA H100 80GB HBM3, 1024, 81559\n"
                                 "1, GPU-bbb, NVIDIA H100 80GB HBM3, [N/A], 81559\n")
    assert [(d.index, d.name, d.hbm_used_mb, d.hbm_total_mb) for d in gpus.values()] == [
        (0, "NVIDIA H100 80GB HBM3", 1024, 81559), (1, "NVIDIA H100 80GB HBM3", None, 81559)]
    apps = parse_nvidia_smi_apps("GPU-bbb, 4242, /usr/bin/python3, 30000\n")
    assert apps == {"GPU-bbb": [DeviceProcess(pid=4242, name="/usr/bin/python3", memory_mb=30000)]}


FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,uuid,name,memory.used,memory.total)
    echo "0, GPU-aaa, NVIDIA H200, 1200, 143771"; echo "1, GPU-bbb, NVIDIA H200, 70000, 143771";;
  --query-compute-apps=*) echo "GPU-bbb, 31337, python, 69000";;
  --query-gpu=driver_version) echo "570.86.15"; echo "570.86.15";;
  *) exit 3;;
esac
"""


@pytest.mark.slow
def test_cuda_listing_through_a_fake_nvidia_smi(tmp_path, monkeypatch):
    from hyport_lib.backend import CudaBackend

    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_NVIDIA_SMI)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    listing = probe_devices(CudaBackend())
    assert (listing.source, listing.driver_version, listing.error) == ("nvidia-smi", "570.86.15", None)
    assert [(d.index, d.name, d.hbm_used_mb) for d in listing.devices] == [
        (0, "NVIDIA H200", 1200), (1, "NVIDIA H200", 70000)]
    assert _busy(CudaBackend()) == {1: [DeviceProcess(pid=31337, name="python", memory_mb=69000)]}


def test_cuda_listing_without_nvidia_smi(tmp_path, monkeypatch):
    from hyport_lib.backend import CudaBackend

    monkeypatch.setenv("PATH", str(tmp_path))  # empty folder: no nvidia-smi
    listing = probe_devices(CudaBackend(num_cards=None))
    assert listing.source == "torch" and "nvidia-smi not found" in listing.error
    assert not listing.processes_known


# --- redaction -----------------------------------------------------------------------------------
SECRETS = {"HCCL_AUTH_TOKEN": "tok-1234567", "ASCEND_ACCESS_KEY": "ak-7654321",
           "NCCL_PASSWORD": "pw-abcdefg", "DS_SECRET": "sec-9999999", "MASTER_CREDENTIAL": "cred-8888"}


def test_collect_env_vars_drops_secret_names():
    env = {**SECRETS, "HCCL_CONNECT_TIMEOUT": "600", "HOME": "/root", "TASK_QUEUE_ENABLE": "2",
           "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "HF_TOKEN": "hf_xyz"}
    assert collect_env_vars(env) == {"HCCL_CONNECT_TIMEOUT": "600", "PYTORCH_NPU_ALLOC_CONF":
                                     "expandable_segments:True", "TASK_QUEUE_ENABLE": "2"}


def test_report_never_contains_secrets(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "600")
    report = _collect(device="cpu", check_ports=False)
    assert report.env_vars["HCCL_CONNECT_TIMEOUT"] == "600"
    outputs = [stage.report_text(report), json.dumps(report.to_dict(), default=str)]
    for text in outputs:
        for key, value in SECRETS.items():
            assert key not in text and value not in text


# --- CANN discovery ----------------------------------------------------------------------------------
def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


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


# --- other checks ------------------------------------------------------------------------------------
def test_port_check_sees_a_listening_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert C.port_taken(port)
        env = {"HCCL_IF_BASE_PORT": str(port)}
        assert C.hccl_ports(2, env) == [port, port + 1, 16666]
        check = C.check_hccl_ports("npu", 1, env, probe=lambda p: p == port)
        assert check.verdict == "FAIL" and str(port) in check.reason
    assert C.check_hccl_ports("npu", 2, {}, probe=lambda p: False).verdict == "PASS"
    assert C.check_hccl_ports("cpu", 2, {}, probe=lambda p: p == 16666).reason.endswith("taken: [16666])")


def test_flash_attn_on_npu_is_a_warning():
    assert C.check_flash_attn("npu", True, "2.7.4").verdict == "WARN"
    assert C.check_flash_attn("npu", False, None).verdict == "PASS"
    assert C.check_flash_attn("cuda", True, "2.7.4").verdict == "PASS"
    assert C.check_flash_attn("cpu", False, None).verdict == "SKIP"


def test_host_memory_and_shm():
    docker_default = {"ram_total_gb": 1500.0, "ram_available_gb": 1400.0,
                      "shm_total_gb": 0.0625, "shm_free_gb": 0.0625}
    ram, shm = host_memory.check_host_memory("npu", 8, docker_default)
    assert ram.verdict == "PASS" and shm.verdict == "WARN" and "--shm-size=8g" in shm.reason
    small = {"ram_total_gb": 64.0, "ram_available_gb": 60.0, "shm_total_gb": 64.0, "shm_free_gb": 64.0}
    ram, shm = host_memory.check_host_memory("npu", 8, small)
    assert ram.verdict == "FAIL" and "128.00 GB needed" in ram.reason and shm.verdict == "PASS"
    ram, _ = host_memory.check_host_memory("npu", 8, small, ram_gb_per_card=4)
    assert ram.verdict == "PASS"


def test_hccl_env():
    assert C.check_hccl_env("npu", {"HCCL_CONNECT_TIMEOUT": "60"}).verdict == "WARN"
    assert C.check_hccl_env("npu", {"ASCEND_LAUNCH_BLOCKING": "1"}).verdict == "WARN"
    ok = C.check_hccl_env("npu", {"HCCL_CONNECT_TIMEOUT": "1200"})
    assert ok.verdict == "PASS" and "1200" in ok.reason and "1836" in ok.reason
    assert C.check_hccl_env("cpu", {}).verdict == "SKIP"


def test_packages_check():
    versions = {p: "1.0" for p in C.REQUIRED_PACKAGES + C.OPTIONAL_PACKAGES}
    versions["transformers"] = "4.57.0"
    assert C.check_packages(versions).verdict == "PASS"
    assert C.check_packages({**versions, "transformers": "4.40.0"}).verdict == "WARN"
    missing = C.check_packages({**versions, "deepspeed": None})
    assert missing.verdict == "FAIL" and "deepspeed" in missing.reason


# --- report ------------------------------------------------------------------------------------------
def _report(*verdicts):
    checks = [Check(f"c{i}", v, "why") for i, v in enumerate(verdicts)]
    return EnvironmentReport(system={}, versions={}, cann=CannFacts(), devices=[], env_vars={}, checks=checks)


def test_verdict_is_the_worst_ignoring_skip():
    assert stage.summarize(_report("PASS", "SKIP", "WARN")).verdict == "WARN"
    assert stage.summarize(_report("PASS", "FAIL", "WARN")).verdict == "FAIL"
    assert stage.summarize(_report("SKIP", "PASS")).verdict == "PASS"
    assert stage.summarize(_report("SKIP")).verdict == "SKIP" and worst_verdict([]) == "SKIP"
    assert _report("PASS", "PASS", "WARN", "SKIP").summary() == {"PASS": 2, "WARN": 1, "FAIL": 0, "SKIP": 1}
    assert _report("PASS", "WARN").summary_line(skip=False) == "1 PASS / 1 WARN / 0 FAIL"
    with pytest.raises(ValueError, match="verdict"):
        Check("x", "MAYBE", "why")


def test_frames():
    report = _report("PASS", "WARN")
    report.devices = [DeviceInfo(0, 0, 0, "910B3", "OK", 10, 100,
                                 processes=[DeviceProcess(7, "python", 5)])]
    report.device = "npu"
    df = checks_frame(report)
    assert list(df.columns) == ["name", "verdict", "reason"] and list(df.verdict) == ["PASS", "WARN"]
    dev = devices_frame(report)
    assert dev.loc[0, "status"] == "BUSY" and dev.loc[0, "processes"] == "pid 7 python 5 MB"


def test_collect_on_cpu_is_fast_and_complete():
    import torch  # noqa: F401  (the import itself is not the check's cost)

    had_deepspeed = "deepspeed" in sys.modules
    report = _collect(device="cpu", num_cards=2)
    assert report.elapsed_s < 3.0
    assert report.device == "cpu" and len(report.devices) == 2
    assert had_deepspeed or "deepspeed" not in sys.modules
    for key in ("os", "cpu_model", "ram_total_gb", "shm_total_gb", "python"):
        assert key in report.system
    for key in ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "safetensors",
                "papermill", "jupyterlab", "ipywidgets"):
        assert key in report.versions
    assert collect_versions()["torch"] == report.versions["torch"]
    names = [c.name for c in report.checks]
    for name in ("torch_npu_compat", "torch_npu_import", "packages", "visible_devices", "busy_cards",
                 "hccl_ports", "flash_attn", "bf16", "host_ram", "dev_shm"):
        assert name in names
    lines = stage.report_text(report).splitlines()
    headings = {"Versions", "CANN", "Container and driver", "Environment variables", "Checks"}
    body = [l for l in lines[1:] if l and l not in headings and not l.startswith("Devices (")]
    assert body and all(l.startswith("- ") and ": " in l for l in body)
    json.dumps(report.to_dict())  # serialisable as is


def test_widget_reprobes():
    from hyport_lib.environment.show import environment_widget, summary_html

    first, second = _report("PASS"), _report("PASS", "FAIL")
    calls = []
    widget = environment_widget(probe=lambda: calls.append(1) or second, report=first)
    assert "Environment: PASS" in widget.status.value
    widget.reprobe()
    assert calls == [1] and widget.status.value == summary_html(second)
    assert "1 FAIL" in widget.status.value


# --- CLI and notebook ---------------------------------------------------------------------------------
@requires_full_stack  # exit 0 needs no FAIL: every required package installed
def test_cli_json_and_exit_code(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    assert main(["env", "--device", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "cpu" and data["verdict"] in ("PASS", "WARN")
    recorded = json.loads((tmp_path / "01_environment.json").read_text())
    assert recorded["verdict"] == data["verdict"] and recorded["provenance"]["device"] == "cpu"
    assert main(["env", "--device", "npu", "--no-record"]) == 1  # no NPU here: backend FAILs
    out = capsys.readouterr().out
    assert "[FAIL] backend" in out
    assert json.loads((tmp_path / "01_environment.json").read_text())["verdict"] == data["verdict"]


def test_summary_names_the_first_fail_before_warns():
    report = _report("PASS", "WARN", "FAIL")
    text = stage.summary_line(report)
    assert text.endswith(f"first FAIL: {report.checks[2].name}")


@pytest.mark.slow
def test_notebook_runs_with_papermill(tmp_path, monkeypatch):
    import papermill as pm

    out = tmp_path / "01.ipynb"
    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    pm.execute_notebook(str(REPO / "notebooks" / "01_environment.ipynb"), str(out),
                        cwd=str(tmp_path), kernel_name="python3", progress_bar=False,
                        parameters={"device": "cpu"})  # about the CPU backend on any host
    result = json.loads((results / "01_environment.json").read_text())
    assert result["stage"] == "01_environment"
    assert result["provenance"]["device"] == "cpu"
    assert set(result["headline"]) >= {"checks", "device", "cards"}
    html = out.read_text()
    assert "Environment:" in html and "torch_npu_compat" in html


def test_video_processors_check_warns_for_a_model_whose_processor_has_a_video_part():
    warn = C.check_video_processors("5.24.0", "torchvision is not installed", "qwen2_vl", True)
    assert warn.verdict == "WARN" and "image processor and tokenizer alone" in warn.reason
    assert "(qwen2_vl) has a video part" in warn.reason and "5.24.0" in warn.reason
    unknown = C.check_video_processors("5.24.0", "torchvision is not installed", "", None)
    assert unknown.verdict == "WARN"
    fine = C.check_video_processors("5.24.0", "torchvision is not installed", "llava", False)
    assert fine.verdict == "PASS" and "nothing is missing" in fine.reason
    assert C.check_video_processors("5.24.0", None, "qwen2_vl", True).verdict == "PASS"


def test_the_environment_report_judges_the_video_part_for_the_model(zoo):
    from hyport_lib.models.loading import torchvision_problem, wants_video_processor

    assert wants_video_processor("tiny") == ("llava", False)
    assert wants_video_processor(str(zoo["qwen2_vl"])) == ("qwen2_vl", True)
    assert wants_video_processor(str(zoo["qwen3"])) == ("qwen3", False)
    assert wants_video_processor("org/not-here") == ("", None)
    assert _collect(check_ports=False).check("video_processors").verdict == "PASS"
    qwen = _collect(check_ports=False, model_path=str(zoo["qwen2_vl"])).check("video_processors")
    assert qwen.verdict == ("PASS" if torchvision_problem() is None else "WARN")


def test_the_printed_torch_npu_command_keeps_the_installed_torch():
    command = C.torch_npu_install_command("2.8.0")
    assert '"torch-npu==2.8.0.*"' in command and '"torch==2.8.0"' in command
    assert C.torch_npu_install_command("2.13.0+cpu").count("2.13.0") == 2
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "npu" not in project.get("optional-dependencies", {})  # no open-ended extra
    texts = [REPO / "README.md", REPO / "environment.yml", *sorted((REPO / "parameters").glob("*.yaml")),
             *sorted((REPO / "docs").glob("*.md"))]
    assert not [p.name for p in texts if ".[npu]" in p.read_text()]  # nothing tells users to use it


def test_a_torch_pre_release_pairs_with_its_release():
    assert C.torch_npu_install_command("2.6.0a0+git1234") == 'pip install "torch-npu==2.6.0.*" "torch==2.6.0"'


def test_env_prints_the_command_when_torch_npu_is_missing_on_a_cann_host():
    check = C.check_torch_npu_import("cpu", None, None, "auto", cann_found=True, torch_version="2.8.0")
    assert check.verdict == "WARN"
    assert 'pip install "torch-npu==2.8.0.*" "torch==2.8.0"' in check.reason


def test_install_hints_follow_the_backend():
    """On a GPU host the packages check once said `pip install -e . -c constraints/cpu.txt`,
    which would replace its CUDA torch with the CPU one."""
    versions = {"torch": "2.11.0", "transformers": "5.17.0"}
    assert "constraints/cpu.txt" in C.check_packages(versions, "cpu").reason
    for kind in ("cuda", "npu"):
        reason = C.check_packages(versions, kind).reason
        assert "pip install deepspeed" in reason.replace("accelerate ", "") or "deepspeed" in reason
        assert "-c constraints/cpu.txt" not in reason and "never with constraints/cpu.txt" in reason


def test_the_ram_check_follows_the_container_limit(tmp_path):
    (tmp_path / "memory.max").write_text("536870912\n")  # 512 MiB, cgroup v2
    assert host_memory.cgroup_memory_limit_gb(tmp_path) == 0.5
    (tmp_path / "memory.max").write_text("max\n")
    assert host_memory.cgroup_memory_limit_gb(tmp_path) is None
    (tmp_path / "memory.max").unlink()
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 ** 63 - 4096))  # v1: none
    assert host_memory.cgroup_memory_limit_gb(tmp_path) is None


def test_a_broken_torch_npu_of_any_kind_is_reported_not_raised(tmp_path, monkeypatch, capsys):
    """A torch_npu built for another torch raises AttributeError from its import."""
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text(
        'raise AttributeError("module torch_npu.dynamo.torchair has no attribute get_npu_backend")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    clear_import_caches()
    try:
        rc = main(["env", "--device", "cpu", "--no-record", "--json"])
        out = capsys.readouterr().out
        assert rc in (0, 1) and "get_npu_backend" in out
    finally:
        sys.modules.pop("torch_npu", None)
        clear_import_caches()
