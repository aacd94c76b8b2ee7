"""Watching torchrun (hyport_lib/train/launch.py): which rank failed first, and why."""

from __future__ import annotations

from hyport_lib.devices.out_of_memory import GIB, MemoryCounters, PeakRss
from hyport_lib.processes import Child
from hyport_lib.train.launch import first_failure


def test_first_failure_names_the_root_cause_rank(tmp_path):
    log = tmp_path / "node0.log"
    log.write_text(
        "[default1]:[hyport train rank 1] test fault: SIGKILL at step 3\n"
        "[default0]:[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:5010.\n"
        "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 2)\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 1)  (SIGKILL)\n")
    assert first_failure(log).startswith("rank 1: killed by signal SIGKILL")
    # torchrun's watch saw the cgroup's oom_kill count rise while its ranks ran
    torchrun = Child("torchrun", proc=None, started=0.0, deadline=None, log_path=log,
                     memory_before=MemoryCounters(oom_kills=0, limit_bytes=24 * GIB),
                     memory_after=MemoryCounters(oom_kills=1, limit_bytes=24 * GIB), peak_rss=PeakRss(1))
    torchrun.peak_rss.bytes = int(23.4 * GIB)
    assert first_failure(log, torchrun) == ("rank 1: killed by signal SIGKILL (-9); out of memory: an OOM kill in "
                                            "this cgroup while it ran (oom_kill 0 -> 1); peak RSS 23.4 GiB of "
                                            "the 24.0 GiB limit")
    log.write_text("[default0]:Traceback (most recent call last):\n"
                   "[default0]:ValueError: dataset is empty\n"
                   "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
                   "  exitcode  : 1 (pid: 1)\n")
    assert first_failure(log) == "rank 0: ValueError: dataset is empty"
    log.write_text("[default1]:TypeError: bad argument\n")
    assert first_failure(log) == "rank 1: TypeError: bad argument"
    assert first_failure(tmp_path / "missing.log") is None


def test_first_failure_reads_a_ranks_exception_behind_torchs_rank_prefix(tmp_path):
    # a worker's exception, as torch prints it: "[rank0]: " after torchrun's "[default0]:"
    log = tmp_path / "node0.log"
    log.write_text("[default0]:[rank0]: peft.utils.error.NoMatchingPeftModuleError: Target modules "
                   "{'qkv_proj'} not found\nRoot Cause (first observed failure):\n[0]:\n"
                   "  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1)\n")
    assert first_failure(log).startswith("rank 0: peft.utils.error.NoMatchingPeftModuleError")
