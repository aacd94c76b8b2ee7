"""Was a process killed for want of memory? The Linux OOM killer ends a process with
SIGKILL and leaves no message in its log, so the answer comes from what it leaves elsewhere:
the memory cgroup's ``oom_kill`` count (read before the child starts and after it ends, so
that a rise is the child's time), and the child's peak resident memory against the limit
(the cgroup's, else the host's RAM). hyport says "out of memory" only where one of these
shows it (:func:`diagnose_kill`), and says the figures either way.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")
#: A peak RSS at or above this fraction of the limit counts as memory exhaustion: the cgroup
#: also charges page cache and kernel memory, which RSS does not show, and a poll misses the
#: last moments before the kill.
NEAR_LIMIT = 0.9
#: v1 writes a number near 2**63 for "no limit".
_NO_LIMIT_V1 = 2 ** 60
GIB = 2 ** 30


@dataclass(frozen=True)
class MemoryCounters:
    """The memory cgroup's counters and the host's RAM at one moment; None where unreadable."""

    cgroup: Optional[str] = None  # the folder read, for messages
    oom_kills: Optional[int] = None  # v2 memory.events oom_kill; v1 memory.oom_control oom_kill
    peak_bytes: Optional[int] = None  # v2 memory.peak; v1 memory.max_usage_in_bytes
    limit_bytes: Optional[int] = None  # the lowest limit of the cgroup and its parents
    ram_bytes: Optional[int] = None  # MemTotal


@dataclass(frozen=True)
class KillDiagnosis:
    """One line with the figures; ``out_of_memory`` only where the evidence shows it."""

    out_of_memory: bool
    line: str

    def __str__(self) -> str:
        return self.line


# --------------------------------------------------------------------------- the cgroup
def memory_cgroup(membership: str, root: Path = CGROUP_ROOT) -> Optional[tuple[Path, int, Path]]:
    """``(folder, version, mount)`` of the memory cgroup named in ``membership`` (the text of
    ``/proc/<pid>/cgroup``): a v1 line whose controllers include ``memory``, else the v2 line
    ``0::/path`` where ``root`` has the memory controller. Without a cgroup namespace the line
    names the host's path, which the container does not see: its own cgroup is the mount's
    root then. None without a memory cgroup."""
    v2_path = None
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            return _existing(root / "memory", path), 1, root / "memory"
    if v2_path is not None and "memory" in _read(root / "cgroup.controllers", "").split():
        return _existing(root, v2_path), 2, root
    return None


def _existing(mount: Path, path: str) -> Path:
    folder = mount / path.strip("/")
    return folder if folder.is_dir() else mount


def read_counters(folder: Path, version: int, mount: Optional[Path] = None,
                  ram_bytes: Optional[int] = None) -> MemoryCounters:
    """The counters of the cgroup ``folder`` (``version`` 1 or 2); the limit is the lowest of
    ``folder`` and its parents up to ``mount`` (a parent's limit binds its children too)."""
    if version == 2:
        events = _key_values(_read(folder / "memory.events", ""))
        oom_kills, peak = events.get("oom_kill"), _number(folder / "memory.peak")
        limit_name = "memory.max"
    else:
        oom_kills = _key_values(_read(folder / "memory.oom_control", "")).get("oom_kill")
        peak, limit_name = _number(folder / "memory.max_usage_in_bytes"), "memory.limit_in_bytes"
    limits = []
    for level in (folder, *folder.parents):
        limit = _number(level / limit_name)
        if limit is not None and limit < _NO_LIMIT_V1:
            limits.append(limit)
        if mount is None or level == mount or mount not in level.parents:
            break
    return MemoryCounters(cgroup=str(folder), oom_kills=oom_kills, peak_bytes=peak,
                          limit_bytes=min(limits) if limits else None,
                          ram_bytes=ram_bytes if ram_bytes is not None else host_ram_bytes())


def memory_counters(root: Path = CGROUP_ROOT) -> MemoryCounters:
    """This process's memory cgroup's counters now (its children start in the same cgroup)."""
    found = memory_cgroup(_read(PROC / "self" / "cgroup", ""), root)
    if found is None:
        return MemoryCounters(ram_bytes=host_ram_bytes())
    return read_counters(*found)


def host_ram_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _read(path: Path, default: str) -> str:
    try:
        return path.read_text()
    except OSError:
        return default


def _number(path: Path) -> Optional[int]:
    text = _read(path, "").strip()
    return int(text) if text.isdigit() else None  # v2 writes "max" for no limit


def _key_values(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


# --------------------------------------------------------------------------- peak RSS
def reaped_children_peak_rss_bytes() -> int:
    """``ru_maxrss`` of ``RUSAGE_CHILDREN``: the largest peak of any child reaped so far (a
    killed one too), so a rise across one ``wait`` is that child's exact peak."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def process_parents(proc: Path = PROC) -> dict[int, int]:
    """``{pid: parent pid}`` of every process; empty where there is no ``/proc``."""
    parents = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return parents
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = (proc / name / "stat").read_bytes()
        except OSError:
            continue  # it ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            parents[int(name)] = int(fields[1])
    return parents


def _status_kib(pid: int, keys: tuple[str, ...], proc: Path = PROC) -> dict[str, int]:
    found = {}
    for line in _read(proc / str(pid) / "status", "").splitlines():
        key, _, value = line.partition(":")
        if key in keys and value.split() and value.split()[0].isdigit():
            found[key] = int(value.split()[0]) * 1024
    return found


#: ``smaps_rollup`` is about 1 KB (one line per counter); a read stops here whatever it holds.
_ROLLUP_MAX_BYTES = 16 * 1024
#: Reading ``smaps_rollup`` walks the process's page tables (CPU: about 5 ms per GiB
#: resident, so 150 ms for a 30 GiB rank): the Pss is read again only after this many times
#: its last cost has passed, keeping the watch's share of a core near 5 %; RSS every sample.
PSS_COST_SPACING = 20


def _pss_bytes(pid: int, proc: Path = PROC) -> Optional[int]:
    """The Pss of ``pid`` from ``/proc/<pid>/smaps_rollup`` (Linux 4.14 on); None where it is
    unreadable (an older kernel, another user's process, one that ended)."""
    try:
        fd = os.open(proc / str(pid) / "smaps_rollup", os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, _ROLLUP_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in text.splitlines():
        key, _, value = line.partition(b":")
        if key == b"Pss" and value.split() and value.split()[0].isdigit():
            return int(value.split()[0]) * 1024
    return None


class PeakRss:
    """The highest resident memory seen of process ``pid`` and everything it started, a lower
    bound (a spike between samples is missed): at each :meth:`sample` the sum of their Pss,
    which divides a shared page among the processes that map it (forked workers, ranks mapping
    one checkpoint), where a sum of RSS would count it once per process; or one member's own
    RSS or high-water mark (VmHWM) where that is higher, or where no Pss is readable.
    ``measure`` names what ``bytes`` is: "Pss" or "RSS"."""

    def __init__(self, pid: int, *, include_root: bool = True) -> None:
        self.pid = pid
        self.include_root = include_root
        self.bytes = 0
        self.measure = "RSS"
        self._pss_due = 0.0  # time.monotonic() from which the Pss is read again

    def record(self, value: int, measure: str) -> None:
        """Keep ``value`` (a ``measure`` figure) where it is higher than the peak so far."""
        if value > self.bytes:
            self.bytes, self.measure = value, measure

    def sample(self, parents: Optional[dict[int, int]] = None, proc: Path = PROC) -> int:
        parents = process_parents(proc) if parents is None else parents
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        members, queue = [], [self.pid]
        while queue:
            pid = queue.pop()
            members.append(pid)
            queue += children.get(pid, [])
        members = members if self.include_root else members[1:]
        for pid in members:
            status = _status_kib(pid, ("VmRSS", "VmHWM"), proc)
            self.record(max(status.values(), default=0), "RSS")
        started = time.monotonic()
        if started >= self._pss_due:
            # of the members whose Pss is readable: still a lower bound
            self.record(sum(_pss_bytes(pid, proc) or 0 for pid in members), "Pss")
            self._pss_due = started + PSS_COST_SPACING * (time.monotonic() - started)
        return self.bytes


class DescendantWatch:
    """Samples, in a thread, the peak RSS of everything this process started (a notebook's
    kernel and its workers), for a caller that does not own their poll loop (papermill)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.peak = PeakRss(os.getpid(), include_root=False)
        self.before = memory_counters()
        self.reaped_before = reaped_children_peak_rss_bytes()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hyport-peak-rss", daemon=True)

    def __enter__(self) -> "DescendantWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> bool:
        self._stop.set()
        self._thread.join()
        return False

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.peak.sample()

    def diagnose(self, code: Optional[int] = None) -> Optional[KillDiagnosis]:
        """:func:`diagnose_kill` for what ended since the watch began."""
        reaped = reaped_children_peak_rss_bytes()
        if reaped > self.reaped_before:
            self.peak.record(reaped, "RSS")
        return diagnose_kill(code, self.before, memory_counters(), self.peak.bytes or None, self.peak.measure)


# --------------------------------------------------------------------------- the diagnosis
def killed_as_the_oom_killer_kills(code: Optional[int]) -> bool:
    """SIGKILL, as Popen (-9) or a shell (137) reports it."""
    return code is not None and (code == -signal.SIGKILL or code == 128 + signal.SIGKILL)


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def diagnose_kill(code: Optional[int], before: Optional[MemoryCounters], after: Optional[MemoryCounters],
                  peak_rss_bytes: Optional[int], peak_measure: str = "RSS") -> Optional[KillDiagnosis]:
    """Was the process that ended with ``code`` killed for want of memory? ``code`` None: it
    died with no status known (a notebook's kernel); a code other than SIGKILL: None (not a
    kill the OOM killer makes). ``before`` / ``after``: the counters around its run;
    ``peak_rss_bytes``: its peak (with what it started), None when unknown; ``peak_measure``:
    what that figure is, "RSS" or "Pss" (:class:`PeakRss`). A risen ``oom_kill`` count is any
    process of the cgroup killed while it ran, not necessarily this one: said as such."""
    if code is not None and not killed_as_the_oom_killer_kills(code):
        return None
    before, after = before or MemoryCounters(), after or MemoryCounters()
    limit = after.limit_bytes or before.limit_bytes
    of = (f"the {_gib(limit)} limit" if limit else
          f"{_gib(after.ram_bytes or before.ram_bytes)} RAM" if (after.ram_bytes or before.ram_bytes) else None)
    limit = limit or after.ram_bytes or before.ram_bytes
    counted = before.oom_kills is not None and after.oom_kills is not None
    count = f"cgroup oom_kill {before.oom_kills} -> {after.oom_kills}" if counted else None
    if peak_rss_bytes:
        peak = f"peak {peak_measure} {_gib(peak_rss_bytes)}" + (f" of {of}" if of else "")
    elif after.peak_bytes and after.peak_bytes != before.peak_bytes:
        peak = f"cgroup peak {_gib(after.peak_bytes)}" + (f" of {of}" if of else "")
    else:
        peak = None
    near = bool(peak_rss_bytes and limit and peak_rss_bytes >= NEAR_LIMIT * limit)
    if counted and after.oom_kills > before.oom_kills:
        return KillDiagnosis(True, f"out of memory: an OOM kill in this cgroup while it ran "
                                   f"(oom_kill {before.oom_kills} -> {after.oom_kills})"
                                   + (f"; {peak}" if peak else ""))
    if near:
        why = (f"; not by the Linux OOM killer ({count}): by a watcher such as systemd-oomd, earlyoom "
               "or the container's" if counted else "")
        return KillDiagnosis(True, f"out of memory, most likely: {peak} (within "
                                   f"{100 - 100 * NEAR_LIMIT:.0f} %){why}")
    said = [f"not by the Linux OOM killer ({count})" if counted else None,
            f"no sign of memory exhaustion ({peak})" if peak else None]
    if not any(said):
        return KillDiagnosis(False, "no memory figures to tell whether it ran out of memory (no "
                                    "memory cgroup counters, peak RSS unknown)")
    return KillDiagnosis(False, "; ".join(part for part in said if part))
