"""Benchmark ``hyport port`` on one big source file (prints numbers; not a test).

Generates a Python file of about ``--mb`` MB (1 by default): ordinary functions, every
twentieth a flash-attn function that calls ``flash_attn_func`` on ``q.cuda()``, the shape
of a large hand-written modeling file. Ports it with the ``hyport`` command in a child
process, ``--rounds`` times, and prints the wall time and the child's peak RSS
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``, measured per round in a fresh
helper process) beside the targets: 5 s and 300 MB for 1 MB. The load average is
printed too: on a shared machine the time moves with it.

    .venv/bin/python bench/bench_port_bounds.py [--mb 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_MB = 5.0, 300.0

#: Run in a fresh helper process, so that RUSAGE_CHILDREN holds the one port only.
MEASURE = """
import json, resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
seconds = time.monotonic() - start
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "seconds": seconds, "peak_mb": peak_kb / 1024,
                  "stderr": done.stderr[-500:]}))
"""


def generate(target_bytes: int) -> str:
    parts = ["import torch\nfrom flash_attn import flash_attn_func\n\n\n"]
    size, n = len(parts[0]), 0
    while size < target_bytes:
        if n % 20 == 0:
            block = (f"def attend_{n}(q, k, v):\n    x = q.cuda()\n"
                     "    return flash_attn_func(x, k, v, causal=True)\n\n\n")
        else:
            block = (f"def helper_{n}(a, b, c=3):\n    \"\"\"Adds things {n}.\"\"\"\n"
                     f"    total = a + b * c\n    for i in range(c):\n        total += i * {n}\n"
                     "    return total\n\n\n")
        parts.append(block)
        size += len(block)
        n += 1
    return "".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_port_") as work:
        src = Path(work) / "src"
        src.mkdir()
        (src / "modeling_big.py").write_text(generate(int(args.mb * 1e6)))
        size = (src / "modeling_big.py").stat().st_size
        print(f"source: one file of {size / 1e6:.2f} MB; load average before "
              f"{os.getloadavg()[0]:.2f}")
        rows = []
        for round_ in range(2 * args.rounds):
            dst = Path(work) / f"dst{round_}"
            # alternately the command and the library call alone (port_tree: no CLI, no
            # import of the proof's modules), so that the split shows
            through = "command" if round_ % 2 == 0 else "port_tree"
            command = [sys.executable, "-c", "from hyport_lib.commands import cli; cli()",
                       "port", str(src), "--out", str(dst)] if through == "command" else \
                [sys.executable, "-c", "import sys; from hyport_lib.port.tree import port_tree; "
                                       "port_tree(sys.argv[1], sys.argv[2])", str(src), str(dst)]
            out = subprocess.run([sys.executable, "-c", MEASURE, *command], cwd=REPO,
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout)
            if row["rc"] != 0:
                raise SystemExit(f"the port failed (exit {row['rc']}): {row['stderr']}")
            changes = len(json.loads((dst / "port.json").read_text())["changes"])
            row["through"] = through
            rows.append(row)
            print(f"round {round_ // 2 + 1}, {through}: {row['seconds']:.2f} s, peak RSS {row['peak_mb']:.0f} MB, "
                  f"{changes} change(s)")
        for through in ("command", "port_tree"):
            _summary(through, [r for r in rows if r["through"] == through])


def _summary(through: str, rows: list[dict]) -> None:
    best_s = min(r["seconds"] for r in rows)
    worst_mb = max(r["peak_mb"] for r in rows)
    print(f"{through}: best time {best_s:.2f} s (target <= {TARGET_S:g} s: "
          f"{'met' if best_s <= TARGET_S else 'MISSED'}); "
          f"peak RSS {worst_mb:.0f} MB (target <= {TARGET_MB:g} MB: "
          f"{'met' if worst_mb <= TARGET_MB else 'MISSED'}); "
          f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
