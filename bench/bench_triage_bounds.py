"""Benchmark the bounds of ``hyport triage`` (prints numbers beside their targets; not a test).

(a) **Long lines are read at scanning speed.** A 5 MB log of long lines (each about
    128 KiB, the most of a line the reader keeps) of the kinds that made a backtracking
    pattern start again at every position: a failed download whose URL is a long run of
    ``name-part.`` pieces, an import error printed after a ``LD_LIBRARY_PATH`` of many
    ``/usr/local/Ascend/...`` folders, and HCCL socket tags repeated. Every line is an error
    line, so each is also scrubbed of secrets. Target: the triage in <= 2 s (before the
    patterns were bounded: 161 s on the probe's log, 80 s on this one).
(b) **A 1 GB sparse log costs no more memory than a line's start and end.** A file of
    1 GiB written with ``truncate`` (all zero bytes, one line, no disk used) is triaged in
    a child process that prints its peak resident memory (``ru_maxrss``). Target: the
    peak within 64 MiB of a child that only imports hyport (before: 1055 MiB: the line the
    byte budget's start fell in was skipped with one ``readline``).

    .venv/bin/python bench/bench_triage_bounds.py [--megabytes 5] [--sparse-gib 1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hyport_lib.triage import triage  # noqa: E402

LINE_BYTES = 128 * 1024
TARGET_SECONDS = 2.0
#: Before the patterns were bounded: the probe's log, and this script's log.
BEFORE_SECONDS = (161.0, 80.0)
#: Before the reader skipped a line in blocks: peak RSS of (b) with 1 GiB.
BEFORE_PEAK_MIB = 1055
#: The kinds of long line (a prefix, the piece repeated, the end).
KINDS = (
    ("ERROR: download failed: https://", "mirror-a.example-b.", "/simple 404"),
    ("export LD_LIBRARY_PATH=", "/usr/local/Ascend/driver/lib64:",
     " ImportError: libfoo.so: undefined symbol: aclInit"),
    ("ERROR ", "[HcclSocket][Listen]", " listen failed"),
)


def long_line(kind: int) -> str:
    head, piece, end = KINDS[kind % len(KINDS)]
    body = piece * ((LINE_BYTES - len(head) - len(end)) // len(piece))
    return head + body + end


def write_long_lines_log(path: Path, megabytes: float) -> int:
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        while out.tell() < megabytes * 1e6:
            out.write(long_line(lines) + "\n")
            lines += 1
    return lines


#: Run in a child: triage the sparse file and print the peak resident memory in KiB.
CHILD = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from hyport_lib.triage import triage
if sys.argv[2] != "-":
    result = triage([sys.argv[2]])  # the default byte budget: the file's last 512 MiB
    assert result.files_read, result.notes
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_kib(path: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO), path], check=True,
                          capture_output=True, text=True, timeout=3600)
    return int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=5.0)
    parser.add_argument("--sparse-gib", type=float, default=1.0)
    parser.add_argument("--dir", default=None, help="where to write the logs (default: a temporary folder)")
    args = parser.parse_args()
    # On a shared machine the time moves with the load: print it beside the numbers.
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        log = Path(folder) / "long_lines.log"
        count = write_long_lines_log(log, args.megabytes)
        began = time.perf_counter()
        result = triage([log], max_seconds=None)  # the time it takes, not where a limit stops it
        took = time.perf_counter() - began
        print(f"(a) long lines: {log.stat().st_size / 1e6:.1f} MB, {count} lines of {LINE_BYTES // 1024} KiB: "
              f"triage {took:.2f} s (target <= {TARGET_SECONDS:.0f} s; before: {BEFORE_SECONDS[0]:.0f} s "
              f"on the probe's log, {BEFORE_SECONDS[1]:.0f} s on this one); "
              f"{result.unrecognised_count} error lines, {len(result.findings)} finding(s)")
        sparse = Path(folder) / "sparse.log"
        with sparse.open("wb") as handle:
            handle.truncate(int(args.sparse_gib * 2**30))
        base = peak_rss_kib("-")
        began = time.perf_counter()
        peak = peak_rss_kib(str(sparse))
        took = time.perf_counter() - began
        print(f"(b) sparse log of {args.sparse_gib:g} GiB (one line of zero bytes): peak RSS "
              f"{peak / 1024:.0f} MiB against {base / 1024:.0f} MiB for the import alone "
              f"(+{(peak - base) / 1024:.0f} MiB; target <= +64 MiB; before: {BEFORE_PEAK_MIB} MiB at 1 GiB), "
              f"{took:.1f} s")


if __name__ == "__main__":
    main()
