"""Which cards a host has: ``npu-smi info``, one sample per layout variant
(tests/data/npu_smi/), exact values, a garbled or cut listing warning instead of failing
``hyport env``; nvidia-smi's queries; torch's count when the tool fails; the CPU's workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.commands import main
from hyport_lib.devices.probe import (DeviceProcess, parse_npu_smi_info, parse_nvidia_smi_apps,
                                      parse_nvidia_smi_gpus, probe_devices)
from hyport_lib.environment import checks as C


DATA = Path(__file__).parents[1] / "data" / "npu_smi"


def parse(name: str):
    return parse_npu_smi_info((DATA / name).read_text(encoding="utf-8"))


def rows(info):
    """(index, npu, chip, phy, name, health, hbm used, hbm total, mem used, mem total)."""
    return [(d.index, d.npu_id, d.chip_id, d.phy_id, d.name, d.health, d.hbm_used_mb,
             d.hbm_total_mb, d.memory_used_mb, d.memory_total_mb) for d in info.devices]


def test_24x_910b_classic():
    info = parse("910b_24x_classic.txt")
    assert (info.tool_version, info.driver_version) == ("24.1.rc1", "24.1.rc1")
    assert rows(info) == [
        (0, 0, 0, None, "910B3", "OK", 3318, 65536, 0, 0),
        (1, 1, 0, None, "910B3", "OK", 64021, 65536, 0, 0),
        (2, 2, 0, None, "910B3", "Warning", 3320, 65536, 0, 0),
    ]
    assert [d.bus_id for d in info.devices] == ["0000:C1:00.0", "0000:01:00.0", "0000:C2:00.0"]
    assert [d.power_w for d in info.devices] == [101.8, 94.6, 92.1]
    assert [d.temp_c for d in info.devices] == [43, 41, 40]
    assert [d.aicore_pct for d in info.devices] == [0, 12, 0]
    assert info.devices[0].processes == []
    assert info.devices[1].processes == [DeviceProcess(pid=576489, name="python", memory_mb=60703)]
    assert info.idle_npus == [0, 2]
    assert info.unmatched_processes == []


def test_25x_chip_phy_id_header():
    info = parse("910b_25x_phy_id.txt")
    assert info.driver_version == "25.2.0"
    assert rows(info) == [
        (0, 4, 0, 4, "910B2", "OK", 41842, 65536, 0, 0),
        (1, 5, 0, 5, "910B2", "OK", 3402, 65536, 0, 0),
    ]
    # Logical index 0 is NPU 4: the index is the listing position, not the NPU number.
    assert info.devices[0].processes == [
        DeviceProcess(pid=1732754, name="python3", memory_mb=19200),
        DeviceProcess(pid=1732755, name="python3", memory_mb=19240),
    ]
    assert info.devices[1].processes == []
    assert info.idle_npus == [5]


def test_a3_two_chips_per_npu_second_power_dash():
    info = parse("a3_two_chips.txt")
    assert info.driver_version == "25.3.rc1"
    assert rows(info) == [
        (0, 0, 0, 0, "Ascend910", "OK", 3143, 65536, 0, 0),
        (1, 0, 1, 1, "Ascend910", "OK", 2887, 65536, 0, 0),
        (2, 1, 0, 2, "Ascend910", "OK", 3141, 65536, 0, 0),
        (3, 1, 1, 3, "Ascend910", "Alarm", 62498, 65536, 0, 0),
    ]
    assert [d.power_w for d in info.devices] == [166.9, None, 162.1, None]
    assert [d.temp_c for d in info.devices] == [38, 37, 37, 36]
    assert [d.aicore_pct for d in info.devices] == [0, 0, 0, 55]
    # "NPU 1 chip 1" is the fourth card, not the second.
    assert [len(d.processes) for d in info.devices] == [0, 0, 0, 1]
    assert info.devices[3].processes == [DeviceProcess(pid=845053, name="VLLMWorker_TP", memory_mb=59656)]
    assert info.idle_npus == [0]


def test_310p_without_hbm():
    info = parse("310p_no_hbm.txt")
    assert info.driver_version == "23.0.0"
    assert rows(info) == [
        (0, 0, 0, 0, "310P3", "OK", None, None, 1074, 21534),
        (1, 1, 0, 1, "310P3", "OK", None, None, 15210, 21534),
    ]
    assert [d.used_mb for d in info.devices] == [1074, 15210]  # falls back to device memory
    assert [d.total_mb for d in info.devices] == [21534, 21534]
    assert [d.aicore_pct for d in info.devices] == [0, 87]
    assert info.devices[1].processes == [DeviceProcess(pid=30211, name="mindie_llm_back", memory_mb=14102)]
    assert info.idle_npus == [0]


def test_process_id_in_container_column():
    info = parse("container_pid_column.txt")
    assert info.driver_version == "25.5.0"
    assert rows(info) == [
        (0, 0, 0, None, "910B4", "OK", 27915, 32768, 0, 0),
        (1, 1, 0, None, "910B4", "OK", 2871, 32768, 0, 0),
    ]
    # The container pid is the one visible here; the host pid is kept beside it.
    # "NA" (not in a container) keeps the host pid as pid.
    assert info.devices[0].processes == [
        DeviceProcess(pid=1187, name="python", memory_mb=24576, host_pid=2849113),
        DeviceProcess(pid=2851002, name="torchrun", memory_mb=512, host_pid=None),
    ]
    assert info.devices[1].processes == []
    assert info.idle_npus == [1]


def test_empty_process_name():
    info = parse("empty_process_name.txt")
    assert rows(info) == [
        (0, 6, 0, None, "910B3", "OK", 33890, 65536, 0, 0),
        (1, 7, 0, None, "910B3", "OK", 3403, 65536, 0, 0),
    ]
    assert info.devices[0].processes == [DeviceProcess(pid=3902211, name="", memory_mb=30480)]
    assert info.devices[0].processes[0].describe() == "pid 3902211 ? 30480 MB"
    assert info.idle_npus == [7]


def test_no_running_processes_found():
    info = parse("no_running_processes.txt")
    assert rows(info) == [
        (0, 0, 0, None, "910B1", "OK", 3356, 65536, 0, 0),
        (1, 1, 0, None, "910B1", "OK", 3358, 65536, 0, 0),
    ]
    assert all(not d.processes and not d.busy for d in info.devices)
    assert info.idle_npus == [0, 1]


def test_ascend950_one_cell_per_field():
    info = parse("ascend950_per_field.txt")
    assert info.driver_version == "26.0.rc1"
    assert rows(info) == [
        (0, 0, 0, None, "Ascend950DT", "OK", 1024, 8192, 0, 0),
        (1, 3, 0, None, "Ascend950DT", "Alarm", 2048, 8192, 0, 0),
    ]
    assert [d.bus_id for d in info.devices] == ["0000:9D:00.0", None]
    assert info.devices[0].processes == [
        DeviceProcess(pid=1001, name="python", memory_mb=256),
        DeviceProcess(pid=101, name="python", memory_mb=512, host_pid=1002),
    ]
    assert info.idle_npus == [3]


def test_process_on_a_chip_missing_from_the_table_is_reported():
    text = (DATA / "no_running_processes.txt").read_text(encoding="utf-8").replace(
        "| No running processes found in NPU 1 ",
        "| 9       0                 | 4242          | ghost                    | 100 ")
    info = parse_npu_smi_info(text)
    assert [len(d.processes) for d in info.devices] == [0, 0]
    assert info.unmatched_processes == [(9, 0, DeviceProcess(pid=4242, name="ghost", memory_mb=100))]


def test_garbage_gives_no_devices():
    info = parse_npu_smi_info("dcmi module initialize failed. ret is -8005\n")
    assert info.devices == [] and info.driver_version is None


@pytest.mark.slow
def test_env_survives_a_garbled_npu_smi_and_warns(fake_npu, npu_smi_sample, monkeypatch, capsys,
                                                   tmp_path):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    path = npu_smi_sample("")
    path.write_bytes((DATA / "910b_24x_classic.txt").read_bytes().replace(b"OK", b"O\xff\xfeK", 1))
    assert main(["env", "--device", "npu", "--json", "--no-record"]) in (0, 1)
    capsys.readouterr()
    # A listing cut short by a wedged driver: one card shown on an 8-card host.
    cut = b"".join((DATA / "910b_24x_classic.txt").read_bytes().splitlines(True)[:9])
    path.write_bytes(cut + b"\xff\xfe stray bytes\n")
    rc = main(["env", "--device", "npu", "--no-record"])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    lines = {line.split("]")[1].split(":")[0].strip(): line for line in out.splitlines()
             if line.startswith("- [")}
    assert lines["busy_cards"].startswith("- [WARN]") and "lists 1 card but torch_npu sees 8" \
        in lines["busy_cards"]
    assert lines["card_health"].startswith("- [WARN]") and "cannot be trusted" in lines["card_health"]
    assert "npu-smi output, as printed" in out and "stray bytes" in out
    path.write_bytes(b"garbage only\n\xff\n")  # nothing recognisable at all
    main(["env", "--device", "npu", "--no-record"])
    out = capsys.readouterr().out
    assert "no chip table" in out and "garbage only" in out
    health = next(line for line in out.splitlines() if line.startswith("- [") and "card_health" in line)
    assert health.startswith("- [WARN]") and "health not reported by npu-smi" in health


def _busy(backend) -> dict:
    """Cards that some process holds: ``{logical index: processes}``."""
    return {d.index: d.processes for d in probe_devices(backend).devices if d.processes}


@pytest.mark.slow
def test_list_devices_with_fake_npu(fake_npu, npu_smi_sample):
    npu_smi_sample((DATA / "910b_24x_classic.txt").read_text(encoding="utf-8"))
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
    npu_smi_sample((DATA / "a3_two_chips.txt").read_text(encoding="utf-8"))
    assert list(_busy(get_backend("npu"))) == [3]


@pytest.mark.slow
def test_npu_smi_failure_falls_back_to_torch(fake_npu, monkeypatch):
    monkeypatch.delenv("HYPORT_FAKE_NPU_SMI_FILE", raising=False)  # the double then exits 2
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")
    listing = probe_devices(get_backend("npu"))
    assert listing.source == "torch" and not listing.processes_known
    assert "exited 2" in listing.error
    assert [(d.index, d.name) for d in listing.devices] == [(0, "Ascend910B3"), (1, "Ascend910B3")]
    assert C.check_busy_cards("npu", listing).verdict == "WARN"


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
