"""Benchmark how soon ``hyport train`` says what it does with a large dataset (prints seconds; not a test).

A JSON Lines dataset of ``--rows`` (100,000) short sharegpt records is written, then
``hyport train`` plans a run on it (the tiny model, one CPU process) exactly as a user
starts it. Its stderr is watched as it arrives; printed:

* seconds from the start of the command to the first progress line (``reading
  dataset`` / ``tokenising dataset``); target <= 1 s after the command's own start-up
  (importing the CLI), which is printed beside it;
* seconds until the plan is done (``training:`` printed): reading and tokenising every
  record, the preflight's whole check. The command is stopped there; nothing is trained.

The load average is printed before and after: on a shared machine the seconds move with it.

    .venv/bin/python bench/bench_dataset_progress.py [--rows 100000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRESS_MARKS = (b"reading dataset", b"tokenising dataset")


def write_dataset(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(json.dumps({"id": f"r{i}", "conversations": [
                {"from": "human", "value": f"Question {i}: what is {i} + {i}?"},
                {"from": "gpt", "value": f"It is {2 * i}."}]}) + "\n")


def startup_seconds() -> float:
    """Seconds ``hyport --help`` takes: the command's start-up before it reads anything."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "hyport_lib", "--help"], cwd=REPO, capture_output=True, check=True)
    return time.monotonic() - started


def watch_plan(data: Path, out: Path) -> dict:
    """Run ``hyport train`` on ``data`` until its plan is done; the seconds of its milestones."""
    command = [sys.executable, "-m", "hyport_lib", "train", "--dataset-path", str(data), "--output-dir", str(out),
               "--no-record", "--max-steps", "1", "--num-cards", "1"]
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.set_blocking(child.stderr.fileno(), False)
    seen, first_progress, planned = b"", None, None
    try:
        while planned is None:
            ready, _, _ = select.select([child.stderr], [], [], 0.05)
            chunk = child.stderr.read() if ready else None
            if chunk:
                seen += chunk
                if first_progress is None and any(mark in seen for mark in PROGRESS_MARKS):
                    first_progress = time.monotonic() - started
                if b"\ntraining: " in seen or seen.startswith(b"training: "):
                    planned = time.monotonic() - started
            elif ready or child.poll() is not None:
                break  # the command ended before its plan was done
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)  # stopped before training: nothing was started
            child.wait(timeout=120)
    return {"first_progress_s": first_progress, "plan_s": planned, "exit": child.returncode,
            "tail": seen.decode(errors="replace").replace("\r", "\n").strip().splitlines()[-3:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where to write the dataset (default: a temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hyport-bench-dataset-", dir=args.dir))
    try:
        data = folder / "data.jsonl"
        write_dataset(data, args.rows)
        print(f"dataset: {args.rows:,} records, {data.stat().st_size / 2**20:.1f} MiB; load average "
              f"{os.getloadavg()[0]:.2f}")
        startup = startup_seconds()
        found = watch_plan(data, folder / "out")
        first, plan = found["first_progress_s"], found["plan_s"]
        print(f"command start-up (hyport --help): {startup:.2f} s")
        print(f"first progress line: {first:.2f} s after the command started" if first is not None
              else "first progress line: none")
        if plan is None:
            print(f"plan: not done (exit {found['exit']}): {found['tail']}")
        else:
            print(f"plan done (every record read and tokenised): {plan:.1f} s "
                  f"({args.rows / plan:,.0f} records/s overall)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
