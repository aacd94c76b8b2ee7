"""Benchmark the inference grid's overhead and its scaling (prints ratios; not a test).

Measured in one run on this machine:

1. ``grid(1 card) / bare script``: the grid with one card against a bare script doing
   the same import, load and generate in one fresh process. Both pay the interpreter
   start and the torch/transformers import; the grid adds its launcher, the preflight,
   the log and result files and the polling, and saves the interpreter teardown (a CPU
   worker leaves with ``os._exit`` once its result is on disk; about a second with
   torch loaded). Target: at most 1.10. Also printed: the launcher's own overhead, the
   grid's wall time minus the worker's own measurement of its run.
2. ``grid(2 cards) / grid(1 card)``: two workers at once against one. On a 2-core CPU
   host each worker gets one thread, so this shows how well two cards share the host
   (1.0 would be perfect overlap).

Runs are interleaved (bare, 1 card, 2 cards, bare, ...) so that load from other
processes hits all three alike. Medians and minima of the wall times are reported
(the minimum is the run least disturbed by other work on a shared host), and the CPU
seconds of the child processes (user + system), which other load barely moves.

    .venv/bin/python bench/bench_grid.py [--repeats 3] [--max-new-tokens 16] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hyport_lib.inference import stage
from hyport_lib.inference.params import Params
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.tiny import ensure_tiny_model

BARE_SCRIPT = """
import json, sys
from hyport_lib.models.generation import run_inference
from hyport_lib.models.generation_config import InferenceConfig
outcome = run_inference(InferenceConfig.from_dict(json.loads(sys.argv[1])))
print(outcome.output_hash)
"""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bare_run(config: dict) -> tuple[float, str]:
    """Wall seconds of one fresh process doing import, load and generate."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", BARE_SCRIPT, json.dumps(config)],
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"bare script failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done.stdout.strip().splitlines()[-1]


LAUNCHER_OVERHEAD: list[float] = []


def grid_run(config: dict, device: str, cards: int, log_root: Path) -> tuple[float, list[str]]:
    started = time.monotonic()
    params = Params(device=device, num_cards=cards, model_path=config["model_path"],
                    max_new_tokens=config["max_new_tokens"], infer_timeout_s=600,
                    log_dir=tempfile.mkdtemp(prefix=f"grid{cards}-", dir=log_root))
    result = stage.run(stage.plan(params))
    wall = time.monotonic() - started
    bad = result.frame[result.frame["status"] != "ok"]
    if not bad.empty:
        raise RuntimeError(f"grid with {cards} card(s) had failures:\n{bad[['card', 'status', 'error']]}")
    if cards == 1:
        LAUNCHER_OVERHEAD.append(wall - result.cards[0]["wall_s"])
    return wall, list(result.frame["output_hash"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model-path", default="tiny")
    args = parser.parse_args()

    model_path = str(ensure_tiny_model()) if args.model_path == "tiny" else args.model_path
    device = "cpu" if args.device == "cpu" else f"{args.device}:0"
    config = InferenceConfig(model_path=model_path, max_new_tokens=args.max_new_tokens).to_dict()
    bare_config = {**config, "device": device}
    log_root = Path(tempfile.mkdtemp(prefix="hyport-bench-grid-"))

    bare_run(bare_config)  # warm the file cache; not counted
    runs = {
        "bare": lambda: [bare_run(bare_config)[1]],
        "grid1": lambda: grid_run(config, args.device, 1, log_root)[1],
        "grid2": lambda: grid_run(config, args.device, 2, log_root)[1],
    }
    walls: dict[str, list[float]] = {k: [] for k in runs}
    cpus: dict[str, list[float]] = {k: [] for k in runs}
    hashes = set()
    for i in range(args.repeats):
        for name, run in runs.items():
            cpu0, t0 = children_cpu_s(), time.monotonic()
            hashes.update(run())
            walls[name].append(time.monotonic() - t0)
            cpus[name].append(children_cpu_s() - cpu0)
        print(f"run {i + 1}: " + "  ".join(
            f"{k} {walls[k][-1]:.2f}s wall {cpus[k][-1]:.2f}s cpu" for k in runs), flush=True)

    med = {k: statistics.median(v) for k, v in walls.items()}
    low = {k: min(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print()
    print(f"device {args.device}, max_new_tokens {args.max_new_tokens}, {args.repeats} repeats")
    print(f"{'':28s} {'wall median':>12s} {'wall min':>9s} {'child CPU':>10s}")
    for name, label in (("bare", "bare script (1 process)"), ("grid1", "grid, 1 card"),
                        ("grid2", "grid, 2 cards")):
        print(f"{label:28s} {med[name]:11.2f}s {low[name]:8.2f}s {cpu[name]:9.2f}s")
    overhead = med["grid1"] / med["bare"]
    print(f"ratio grid(1)/bare    = {overhead:.3f} median wall, {low['grid1'] / low['bare']:.3f} min wall, "
          f"{cpu['grid1'] / cpu['bare']:.3f} CPU  (target <= 1.10 wall: "
          f"{'met' if overhead <= 1.10 else 'NOT met'} on the median)")
    print(f"ratio grid(2)/grid(1) = {med['grid2'] / med['grid1']:.3f} median wall, "
          f"{low['grid2'] / low['grid1']:.3f} min wall, {cpu['grid2'] / cpu['grid1']:.3f} CPU  "
          f"(wall 1.0 = the two cards overlap perfectly; CPU 2.0 = no shared work)")
    print(f"launcher overhead, 1 card (grid wall - worker's own wall): "
          f"{statistics.median(LAUNCHER_OVERHEAD):.2f}s median")
    print(f"identical outputs across all runs: {len(hashes) == 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
