"""Benchmark ``hyport env --host-root`` on a hostile tree (prints numbers beside their targets; not a test).

A complete copied tree (``tests/environment/test_container.build_tree``) beside the same tree
made hostile (issue 29): no ``/.dockerenv`` and FIFOs at ``proc/1/cgroup``, ``proc/1/mountinfo`` and
``proc/mounts``, a device node (``/dev/zero``'s 1,5, when this user may make one; else a
FIFO) as the driver's ``version.info``, a 2 MiB CANN install info, and
``ascend-toolkit/latest`` an absolute link to a folder of this machine.

(a) **The tree's reads cost what a good tree's cost.** The tree part of stage 01 (CANN
    facts, version files, container checks) timed in-process on each tree. Target: the
    hostile tree within 2x the complete one and <= 0.1 s (before: it never ended).
(b) **Memory stays flat.** ``hyport env --host-root TREE`` in a child that prints its peak
    resident memory (``ru_maxrss``). Target: the hostile tree within 16 MiB of the complete
    one (before: 1.7 GB after 5 s and growing, and SIGTERM did not end it).

    .venv/bin/python bench/bench_env_tree.py [--repeat 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "environment")]

from test_container import CANN_850_INFO, build_tree  # noqa: E402

from hyport_lib.environment.container import check_container  # noqa: E402
from hyport_lib.environment.facts import collect_cann, read_driver_versions  # noqa: E402

TARGET_RATIO = 2.0
TARGET_SECONDS = 0.1
TARGET_EXTRA_MIB = 16
#: Before: the probe's reading of a device node (RSS after 5 s; it then kept growing).
BEFORE_PEAK_MIB = 1700
CHILD = ("import resource, sys\nfrom hyport_lib.commands import main\n"
         "code = main(['env', '--device', 'cpu', '--check-ports', 'false', '--host-root', sys.argv[1], "
         "'--no-record'])\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, code, file=sys.stderr)")


def hostile_tree(base: Path) -> tuple[Path, str]:
    """The complete tree made hostile; returns it and what stands at version.info."""
    root = build_tree(base)
    (root / ".dockerenv").unlink()  # so that /proc/1/cgroup and /proc/1/mountinfo are read
    for place in ("proc/1/cgroup", "proc/1/mountinfo", "proc/mounts"):
        (root / place).unlink(missing_ok=True)
        (root / place).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(root / place)
    version = root / "usr/local/Ascend/driver/version.info"
    version.unlink()
    try:
        os.mknod(version, stat.S_IFCHR | 0o644, os.makedev(1, 5))
        node = "a device node (1,5)"
    except PermissionError:
        os.mkfifo(version)
        node = "a FIFO (no permission to make a device node)"
    info = root / "usr/local/Ascend/cann/x86_64-linux/ascend_toolkit_install.info"
    info.write_text(CANN_850_INFO + "#" * (2 << 20))
    machine = base / "machine-toolkit"
    (machine / "x86_64-linux").mkdir(parents=True)
    (machine / "x86_64-linux/ascend_toolkit_install.info").write_text(CANN_850_INFO.replace("8.5.0", "7.0.0"))
    (root / "usr/local/Ascend/ascend-toolkit").mkdir(parents=True)
    (root / "usr/local/Ascend/ascend-toolkit/latest").symlink_to(machine)
    return root, node


def tree_part(root: Path) -> tuple[str, str]:
    """Stage 01's reads of ``root`` (what ``container_and_driver`` does); its CANN and verdicts."""
    cann = collect_cann({}, root, arch="x86_64")
    versions = read_driver_versions(root, cann.version, tuple(cann.refused))
    findings = check_container(root, kind="npu", requested="npu", num_cards=8, environ={}, listed=None,
                               versions=versions, shm_gb_per_card=1.0)
    return str(versions.cann), " ".join(f"{c.name}={c.verdict}" for c in findings.checks)


def timed(root: Path, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        tree_part(root)
    return (time.perf_counter() - started) / repeat


def peak_mib(root: Path) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(root)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    peak, code = done.stderr.strip().splitlines()[-1].split()
    return int(peak), int(code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of (a) per tree")
    parser.add_argument("--dir", default="", help="where the trees are built (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hyport-bench-env-") as scratch:
        base = Path(args.dir or scratch)
        good = build_tree(base / "good")
        bad, node = hostile_tree(base / "bad")
        print(f"hostile tree: no /.dockerenv; FIFOs at /proc/1/cgroup, /proc/1/mountinfo, /proc/mounts; version.info {node}; "
              f"2 MiB install info; ascend-toolkit/latest -> {base / 'bad/machine-toolkit'}")
        for name, root in (("complete", good), ("hostile", bad)):
            cann, verdicts = tree_part(root)
            print(f"  {name:9} CANN {cann:6} {verdicts}")
        good_s, bad_s = timed(good, args.repeat), timed(bad, args.repeat)
        ratio = bad_s / good_s
        ok_a = ratio <= TARGET_RATIO and bad_s <= TARGET_SECONDS
        print(f"(a) tree part: complete {good_s * 1000:.1f} ms, hostile {bad_s * 1000:.1f} ms, ratio {ratio:.2f} "
              f"(target <= {TARGET_RATIO:g}x and <= {TARGET_SECONDS * 1000:.0f} ms): {'OK' if ok_a else 'MISSED'}")
        (good_mib, good_code), (bad_mib, bad_code) = peak_mib(good), peak_mib(bad)
        ok_b = bad_mib - good_mib <= TARGET_EXTRA_MIB
        print(f"(b) hyport env peak RSS: complete {good_mib} MiB (exit {good_code}), hostile {bad_mib} MiB "
              f"(exit {bad_code}), +{bad_mib - good_mib} MiB (target <= +{TARGET_EXTRA_MIB} MiB; before: "
              f"{BEFORE_PEAK_MIB} MiB after 5 s, growing): {'OK' if ok_b else 'MISSED'}")
    return 0 if ok_a and ok_b else 1


if __name__ == "__main__":
    sys.exit(main())
