"""Host RAM and /dev/shm against the ranks: the container's memory limit, the /dev/shm
size of a container's mounts."""

from __future__ import annotations

import pytest

from hyport_lib.devices import host_memory
from hyport_lib.devices.host_memory import check_container_shm, shm_size_flag, shm_size_from_mounts


def test_host_memory_and_shm():
    docker_default = {"ram_total_gb": 1500.0, "ram_available_gb": 1400.0,
                      "shm_total_gb": 0.0625, "shm_free_gb": 0.0625}
    ram, shm = host_memory.check_host_memory("npu", 8, docker_default)
    assert ram.verdict == "PASS" and shm.verdict == "WARN" and "--shm-size=8g" in shm.reason
    small = {"ram_total_gb": 64.0, "ram_available_gb": 60.0, "shm_total_gb": 64.0, "shm_free_gb": 64.0}
    ram, shm = host_memory.check_host_memory("npu", 8, small)
    assert ram.verdict == "FAIL" and "128.00 GiB needed" in ram.reason and shm.verdict == "PASS"
    ram, _ = host_memory.check_host_memory("npu", 8, small, ram_gb_per_card=4)
    assert ram.verdict == "PASS"


def test_the_ram_check_follows_the_container_limit(tmp_path):
    (tmp_path / "memory.max").write_text("536870912\n")  # 512 MiB, cgroup v2
    assert host_memory.cgroup_memory_limit_gb(tmp_path) == 0.5
    (tmp_path / "memory.max").write_text("max\n")
    assert host_memory.cgroup_memory_limit_gb(tmp_path) is None
    (tmp_path / "memory.max").unlink()
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 ** 63 - 4096))  # v1: none
    assert host_memory.cgroup_memory_limit_gb(tmp_path) is None


#: /proc/mounts lines of a container started with --shm-size=256g, and of docker's default.
MOUNTS_256G = "overlay / overlay rw,relatime 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=268435456k 0 0\n"

MOUNTS_DOCKER_DEFAULT = "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n"


def test_shm_judged_from_plain_numbers():
    assert shm_size_from_mounts(MOUNTS_DOCKER_DEFAULT) == 0.0625
    assert shm_size_from_mounts(MOUNTS_256G) == 256.0
    assert shm_size_from_mounts("tmpfs /dev/shm tmpfs rw,size=512m 0 0") == 0.5
    assert shm_size_from_mounts("tmpfs /dev/shm tmpfs rw,nosuid 0 0") is None  # no size= given
    assert shm_size_flag(2.5) == "--shm-size=3g" and shm_size_flag(0.25) == "--shm-size=1g"
    assert shm_size_flag(16.0) == "--shm-size=16g"
    assert check_container_shm(16.0, 4, 4.0).verdict == "PASS"
    low = check_container_shm(15.9, 4, 4.0)
    assert low.verdict == "WARN" and low.reason.endswith("--shm-size=16g")


def test_the_last_dev_shm_mount_is_the_one_in_effect():
    runtime_then_bigger = MOUNTS_DOCKER_DEFAULT + "tmpfs /dev/shm tmpfs rw,relatime,size=8g 0 0\n"
    assert shm_size_from_mounts(runtime_then_bigger) == 8.0
    # Kubernetes' memory emptyDir over the runtime's 64 MB, with no size= of its own
    assert shm_size_from_mounts(MOUNTS_DOCKER_DEFAULT + "tmpfs /dev/shm tmpfs rw,relatime 0 0\n") is None


def test_worker_counts_the_host_cannot_hold_are_said_with_the_figures_never_1_cards(monkeypatch):
    monkeypatch.setattr(host_memory, "host_memory", lambda: {"ram_total_gb": 0.5, "ram_available_gb": 0.4})
    with pytest.raises(ValueError) as one:
        host_memory.require_host_ram("cpu", 1)
    said = str(one.value)
    assert said.startswith("num_cards=1: this host cannot hold one cpu worker: RAM is 0.50 GiB < 1.00 GiB needed "
                           "for 1 card")
    assert "too many" not in said and "1 cards" not in said and " GB" not in said
    with pytest.raises(ValueError) as two:
        host_memory.require_host_ram("cpu", 2, "training process")
    assert str(two.value).startswith("num_cards=2: too many cpu training processes for this host: RAM is "
                                     "0.50 GiB < 2.00 GiB needed for 2 cards (1 GiB each)")
    monkeypatch.setattr(host_memory, "host_memory", lambda: {"ram_total_gb": 23.5, "ram_available_gb": 20.0})
    host_memory.require_host_ram("cpu", 2)

