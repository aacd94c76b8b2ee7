"""Peak RSS and wall time of every stage's command at several model sizes, on this CPU
(prints a table; not a test). The figures are a CPU host's: RSS of the largest process of
the command's tree (``ru_maxrss`` of its waited children), not an NPU's card memory.

    .venv/bin/python bench/stage_footprint.py [--models tiny smollm2 /path/to/7b] [--stages 01 03 05]

A 7 B checkpoint of random bf16 weights: ``bench/build_random_checkpoint.py`` (15 GB of disk).
Stages that the memory model refuses end in seconds with exit 2: the table says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Each stage's command, short settings: what the footprint depends on is the model.
COMMANDS = {
    "01": lambda m, out: ["env", "--model-path", m],
    "02": lambda m, out: ["attention", "--model-path", m, "--dtypes", "float32"],
    "03": lambda m, out: ["infer", "--device", "cpu", "--num-cards", "1", "--model-path", m,
                          "--max-new-tokens", "8", "--log-dir", str(out / "infer")],
    "04": lambda m, out: ["train", "--device", "cpu", "--num-cards", "2", "--model-path", m, "--max-steps", "2",
                          "--save-steps", "2", "--max-seq-len", "128", "--output-dir", str(out / "train")],
    "05": lambda m, out: ["verify", _folder(m), "--reload"],
}


def _folder(model: str) -> str:
    """``verify`` takes a folder: the presets' cached checkpoints."""
    sys.path.insert(0, str(REPO))
    from hyport_lib.models.preflight import check_model_path

    return check_model_path(model)


def run_one(args: list[str], timeout_s: float) -> tuple[int, float, float, str]:
    """``(exit status, seconds, peak RSS GiB of the tree's largest process, last line)``,
    each command in a fresh child that waits for it, so ru_maxrss is this command's alone."""
    probe = ("import resource, subprocess, sys, time; t = time.time(); "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
             "tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ['']; "
             "print(r.returncode, time.time() - t, peak, tail[0][:160], sep='\\t')")
    try:
        done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "hyport_lib", *args],
                              capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return 124, timeout_s, float("nan"), "timed out"
    code, seconds, peak_kib, tail = done.stdout.strip().split("\t", 3)
    return int(code), float(seconds), int(peak_kib) / 2 ** 20, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    parser.add_argument("--stages", nargs="+", default=list(COMMANDS))
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    print(f"{'model':<22} {'stage':<5} {'exit':>4} {'seconds':>8} {'peak GiB':>9}  last line")
    for model in args.models:
        for stage in args.stages:
            with tempfile.TemporaryDirectory(prefix="hyport-footprint-") as scratch:
                code, seconds, peak, tail = run_one(COMMANDS[stage](model, Path(scratch)), args.timeout)
            print(f"{Path(model).name[:22]:<22} {stage:<5} {code:>4} {seconds:8.1f} {peak:9.2f}  {tail}", flush=True)
    print(f"CPU figures of this host ({os.cpu_count()} cores): RSS, not card memory. "
          f"ru_maxrss of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
