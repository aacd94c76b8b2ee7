"""Benchmark the main job: the default ``hyport report`` (five stages) end to end.

Prints the wall time of each run, its stages' own durations (from ``run.json``) and the
median against the target: at most 4 minutes on a 2-core machine. Not a test: a timing
depends on the machine and its load; this prints it, side by side with the target.

    .venv/bin/python bench/bench_report.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 240.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    walls = []
    with tempfile.TemporaryDirectory(prefix="hyport-bench-report-") as tmp:
        for i in range(args.repeats):
            out = Path(tmp) / f"run{i}"
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "hyport_lib", "report", "--profile", "default",
                                   "--output-dir", str(out)], capture_output=True, text=True)
            wall = time.monotonic() - started
            if done.returncode != 0:
                print(done.stderr[-3000:])
                return 1
            walls.append(wall)
            run = json.loads(next(out.glob("*/run.json")).read_text())
            stages = ", ".join(f"{s['stage']} {s['duration_s']:.1f}s {s['verdict']}" for s in run["stages"])
            print(f"run {i + 1}: {wall:.1f}s wall ({stages})")
    median = statistics.median(walls)
    print(f"\nmedian wall time {median:.1f}s; target <= {TARGET_S:.0f}s: ratio {median / TARGET_S:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
