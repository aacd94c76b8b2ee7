"""hyport_lib.devices.out_of_memory: a kill is said as out of memory only where the cgroup's
counters or the peak RSS against the limit show it, with the figures; read on fake cgroup
and /proc folders (v1 and v2) built in tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from hyport_lib.devices import out_of_memory
from hyport_lib.devices.out_of_memory import (GIB, MemoryCounters, PeakRss, diagnose_kill, memory_cgroup,
                                              read_counters)

RAM = int(23.5 * GIB)


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _v2(folder: Path, *, oom_kill: int, peak: int, limit: str) -> Path:
    return _write(folder, {"memory.events": f"low 0\nhigh 0\nmax 7\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n",
                           "memory.peak": f"{peak}\n", "memory.max": f"{limit}\n"})


# --------------------------------------------------------------------------- which cgroup
def test_the_memory_cgroup_is_found_from_proc_self_cgroup(tmp_path):
    (tmp_path / "memory" / "process_api" / "abc").mkdir(parents=True)
    v1 = "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n"
    assert memory_cgroup(v1, tmp_path) == (tmp_path / "memory" / "process_api" / "abc", 1, tmp_path / "memory")
    # without a cgroup namespace the host's path is named: the container's own is the mount's root
    assert memory_cgroup("5:cpu,memory:/docker/0123\n", tmp_path) == (tmp_path / "memory", 1, tmp_path / "memory")
    # v2: only where the root has the memory controller (hybrid hosts mount a v2 tree without it)
    (tmp_path / "user.slice").mkdir()
    assert memory_cgroup("0::/user.slice\n", tmp_path) is None
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert memory_cgroup("0::/user.slice\n", tmp_path) == (tmp_path / "user.slice", 2, tmp_path)
    assert memory_cgroup("", tmp_path) is None


def test_v2_counters_and_the_lowest_limit_of_the_cgroup_and_its_parents(tmp_path):
    _write(tmp_path, {"memory.max": f"{RAM}\n"})  # the mount's root: the container's limit
    child = _v2(tmp_path / "job", oom_kill=2, peak=5 * GIB, limit="max")
    counters = read_counters(child, 2, tmp_path, ram_bytes=64 * GIB)
    assert counters == MemoryCounters(str(child), oom_kills=2, peak_bytes=5 * GIB, limit_bytes=RAM,
                                      ram_bytes=64 * GIB)
    _write(child, {"memory.max": f"{8 * GIB}\n"})
    assert read_counters(child, 2, tmp_path, ram_bytes=64 * GIB).limit_bytes == 8 * GIB


def test_v1_counters_and_its_no_limit_number(tmp_path):
    folder = _write(tmp_path / "memory", {
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        "memory.max_usage_in_bytes": f"{22 * GIB}\n", "memory.limit_in_bytes": "9223372036854771712\n",
        "memory.failcnt": "12\n"})
    counters = read_counters(folder, 1, folder, ram_bytes=RAM)
    assert (counters.oom_kills, counters.peak_bytes, counters.limit_bytes) == (3, 22 * GIB, None)
    assert read_counters(tmp_path / "gone", 1, ram_bytes=RAM) == MemoryCounters(str(tmp_path / "gone"),
                                                                                ram_bytes=RAM)


# --------------------------------------------------------------------------- the diagnosis
@pytest.mark.parametrize("version", [1, 2])
def test_a_risen_oom_kill_count_is_out_of_memory_with_the_figures(tmp_path, version):
    folder = tmp_path / f"v{version}"
    if version == 2:
        before = read_counters(_v2(folder, oom_kill=0, peak=10 * GIB, limit=str(RAM)), 2, ram_bytes=64 * GIB)
        after = read_counters(_v2(folder, oom_kill=1, peak=RAM, limit=str(RAM)), 2, ram_bytes=64 * GIB)
    else:
        before = read_counters(_write(folder, {"memory.oom_control": "oom_kill 0\n", "memory.failcnt": "0\n",
                                               "memory.limit_in_bytes": f"{RAM}\n",
                                               "memory.max_usage_in_bytes": f"{10 * GIB}\n"}), 1, ram_bytes=64 * GIB)
        after = read_counters(_write(folder, {"memory.oom_control": "oom_kill 1\n", "memory.failcnt": "9\n",
                                              "memory.max_usage_in_bytes": f"{RAM}\n"}), 1, ram_bytes=64 * GIB)
    said = diagnose_kill(-9, before, after, int(22.9 * GIB))
    assert said.out_of_memory
    # any process of the cgroup may be the one killed: said as the cgroup's, not as this child's
    assert said.line == ("out of memory: an OOM kill in this cgroup while it ran (oom_kill 0 -> 1); "
                         "peak RSS 22.9 GiB of the 23.5 GiB limit")
    assert diagnose_kill(137, before, after, None).line == (  # a shell's 128 + 9; no RSS: the cgroup's peak
        "out of memory: an OOM kill in this cgroup while it ran (oom_kill 0 -> 1); "
        "cgroup peak 23.5 GiB of the 23.5 GiB limit")
    assert diagnose_kill(-9, before, after, int(22.9 * GIB), "Pss").line.endswith(
        "; peak Pss 22.9 GiB of the 23.5 GiB limit")  # the figure says what it is


def test_a_kill_with_no_sign_of_memory_exhaustion_says_so_with_the_figures():
    counters = MemoryCounters("/sys/fs/cgroup", oom_kills=0, ram_bytes=RAM)
    said = diagnose_kill(-9, counters, counters, int(0.3 * GIB))
    assert not said.out_of_memory
    assert said.line == ("not by the Linux OOM killer (cgroup oom_kill 0 -> 0); no sign of memory exhaustion "
                         "(peak RSS 0.3 GiB of 23.5 GiB RAM)")
    # a dead notebook kernel: its status is unknown, judged the same
    assert diagnose_kill(None, counters, counters, int(0.3 * GIB)) == said
    uncounted = MemoryCounters(ram_bytes=RAM)
    assert diagnose_kill(-9, uncounted, uncounted, int(0.3 * GIB)).line == (
        "no sign of memory exhaustion (peak RSS 0.3 GiB of 23.5 GiB RAM)")
    nothing = diagnose_kill(-9, None, None, None)
    assert not nothing.out_of_memory and nothing.line.startswith("no memory figures to tell")


def test_a_peak_at_the_limit_is_out_of_memory_even_without_counters():
    limited = MemoryCounters(limit_bytes=RAM, ram_bytes=64 * GIB)
    said = diagnose_kill(-9, limited, limited, int(22.9 * GIB))
    assert said.out_of_memory and said.line == "out of memory, most likely: peak RSS 22.9 GiB of the 23.5 GiB limit (within 10 %)"
    counted = MemoryCounters(oom_kills=4, ram_bytes=RAM)  # counted, not risen: someone else's kill
    said = diagnose_kill(-9, counted, counted, int(22.0 * GIB))
    assert said.out_of_memory and "not by the Linux OOM killer (cgroup oom_kill 4 -> 4)" in said.line
    assert not diagnose_kill(-9, limited, limited, int(20.0 * GIB)).out_of_memory  # 85 %: not near


@pytest.mark.parametrize("code", [0, 1, 3, -15, -6, 143])
def test_only_a_sigkill_or_an_unknown_end_is_judged(code):
    risen = MemoryCounters(oom_kills=1, limit_bytes=RAM)
    assert diagnose_kill(code, MemoryCounters(oom_kills=0), risen, RAM) is None


# --------------------------------------------------------------------------- peak RSS
def _process(proc: Path, pid: int, parent: int, rss_kib: int, hwm_kib: int, comm: str = "python",
             pss_kib: Optional[int] = -1) -> None:
    """A fake ``/proc/<pid>``; its Pss is its RSS unless ``pss_kib`` says (None: no smaps_rollup)."""
    files = {"stat": f"{pid} ({comm}) S {parent} {pid} {pid} 0 -1\n",
             "status": f"Name:\t{comm}\nVmHWM:\t{hwm_kib} kB\nVmRSS:\t{rss_kib} kB\n"}
    if pss_kib is not None:
        pss_kib = rss_kib if pss_kib == -1 else pss_kib
        files["smaps_rollup"] = (f"55d0-7ffc ---p 00000000 00:00 0   [rollup]\nRss:\t{rss_kib} kB\n"
                                 f"Pss:\t{pss_kib} kB\nPss_Anon:\t{pss_kib} kB\nShared_Clean:\t0 kB\n")
    _write(proc / str(pid), files)
    if pss_kib is None:
        (proc / str(pid) / "smaps_rollup").unlink(missing_ok=True)


def test_the_peak_counts_a_process_and_what_it_started_never_its_neighbours(tmp_path):
    _process(tmp_path, 10, 1, 100, 100, comm="torch run (x)")  # a comm with spaces and a parenthesis
    _process(tmp_path, 11, 10, 2_000, 3_000)  # rank 0
    _process(tmp_path, 12, 10, 2_500, 2_600)  # rank 1
    _process(tmp_path, 13, 12, 400, 400)  # what rank 1 started
    _process(tmp_path, 20, 1, 50_000, 50_000)  # a neighbour
    peak = PeakRss(10)
    assert peak.sample(proc=tmp_path) == (100 + 2_000 + 2_500 + 400) * 1024  # the sum at this moment
    assert peak.measure == "Pss"
    _process(tmp_path, 11, 10, 100, 9_000)  # rank 0 shrank, after a peak no sum showed
    assert peak.sample(proc=tmp_path) == 9_000 * 1024  # one member's own high-water mark
    assert peak.measure == "RSS"
    assert PeakRss(10, include_root=False).sample(proc=tmp_path) == 9_000 * 1024
    assert PeakRss(99).sample(proc=tmp_path) == 0  # gone


def test_pages_that_processes_share_count_once_in_the_peak(tmp_path, monkeypatch):
    monkeypatch.setattr(out_of_memory, "PSS_COST_SPACING", 0)  # the Pss read at every sample
    # a worker and 21 forks of it sharing its 1 GiB copy-on-write: each shows 1 GiB of RSS,
    # each 1/22 of it as Pss; a sum of RSS would say 22 GiB, near the 23.5 GiB RAM
    gib_kib = GIB // 1024
    _process(tmp_path, 10, 1, gib_kib, gib_kib, pss_kib=gib_kib // 22)
    for pid in range(11, 32):
        _process(tmp_path, pid, 10, gib_kib, gib_kib, pss_kib=gib_kib // 22)
    peak = PeakRss(10)
    assert peak.sample(proc=tmp_path) == GIB  # one member's RSS; the Pss sum is a touch lower
    assert peak.measure == "RSS"
    for pid in range(10, 32):  # each wrote 512 MiB of its own: the Pss sum is the higher figure
        _process(tmp_path, pid, 10 if pid > 10 else 1, gib_kib + gib_kib // 2, gib_kib + gib_kib // 2,
                 pss_kib=gib_kib // 22 + gib_kib // 2)
    assert peak.sample(proc=tmp_path) == 22 * (gib_kib // 22 + gib_kib // 2) * 1024
    assert peak.measure == "Pss" and 11.9 * GIB < peak.bytes <= 12 * GIB  # 1 + 22 x 0.5 GiB, not 22 x 1.5
    said = diagnose_kill(-9, MemoryCounters(ram_bytes=RAM), MemoryCounters(ram_bytes=RAM), peak.bytes, peak.measure)
    assert not said.out_of_memory and said.line == "no sign of memory exhaustion (peak Pss 12.0 GiB of 23.5 GiB RAM)"


def test_the_pss_is_read_again_only_after_many_times_its_cost(tmp_path, monkeypatch):
    monkeypatch.setattr(out_of_memory, "PSS_COST_SPACING", 10 ** 9)
    _process(tmp_path, 10, 1, 1_000, 1_000, pss_kib=400)
    _process(tmp_path, 11, 10, 1_000, 1_000, pss_kib=900)
    peak = PeakRss(10)
    assert peak.sample(proc=tmp_path) == 1_300 * 1024 and peak.measure == "Pss"
    _process(tmp_path, 11, 10, 1_000, 1_000, pss_kib=5_000)
    assert peak.sample(proc=tmp_path) == 1_300 * 1024  # not yet due: the RSS alone was read
    monkeypatch.setattr(peak, "_pss_due", 0.0)
    assert peak.sample(proc=tmp_path) == 5_400 * 1024


def test_without_smaps_rollup_the_peak_is_the_largest_single_process(tmp_path):
    _process(tmp_path, 10, 1, 100, 100, pss_kib=None)
    _process(tmp_path, 11, 10, 2_000, 3_000, pss_kib=None)
    _process(tmp_path, 12, 10, 2_500, 2_600, pss_kib=None)
    peak = PeakRss(10)
    assert peak.sample(proc=tmp_path) == 3_000 * 1024 and peak.measure == "RSS"  # never a sum of RSS
    (tmp_path / "10" / "smaps_rollup").write_bytes(b"Rss: " + b"9" * 100_000)  # no Pss line in what is read
    assert PeakRss(10).sample(proc=tmp_path) == 3_000 * 1024
