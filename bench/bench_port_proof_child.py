"""Benchmark the port proof in a child process against the same proof in this process
(prints times and ratios; not a test).

``hyport port --proof`` and stage 02's ``port_proof`` run the proof in a fresh interpreter
(:mod:`hyport_lib.port.proof_run`): the user's code never runs in hyport's process. The
price is the child's start (an interpreter, torch, transformers) on top of the proof
itself. For each vendored remote-code model (tests/data/remote_code) the port is made
once, then proven in this process (warm: torch already imported) and in a child, side by
side; the last line is the child's overhead. Target: the child adds no more than a few
seconds (its start) to a proof, whatever the model.

    python bench/bench_port_proof_child.py [--only internlm2,ovis_siglip2_navit]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REMOTE = REPO / "tests" / "data" / "remote_code"
#: The config fields each model needs (as in tests/port/test_port_models.py).
MODELS = {
    "ovis_siglip2_navit": {"fullatt_block_indexes": "1"},
    "internlm2": {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model folders (default: all)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    import torch

    from hyport_lib.proof.port import prove_port
    from hyport_lib.port.proof_run import prove_port_in_child
    from hyport_lib.port.tree import port_tree

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"{'model':20} {'in process s':>13} {'child s':>8} {'child - in':>11} {'ratio':>6}  verdicts")
    overheads = []
    with tempfile.TemporaryDirectory(prefix="hyport-bench-port-proof-") as scratch:
        for name in names:
            result = port_tree(REMOTE / name, Path(scratch) / name)
            started = time.perf_counter()
            here = prove_port(REMOTE / name, result.dst, config_overrides=MODELS[name])
            in_process = time.perf_counter() - started
            started = time.perf_counter()
            child = prove_port_in_child(REMOTE / name, result.dst, config_overrides=MODELS[name])
            in_child = time.perf_counter() - started
            overheads.append(in_child - in_process)
            print(f"{name:20} {in_process:13.2f} {in_child:8.2f} {in_child - in_process:11.2f} "
                  f"{in_child / in_process:6.2f}  {here.verdict} / {child.verdict}"
                  + (f" ({child.error})" if child.error else ""))
    print(f"child overhead: {min(overheads):.2f}-{max(overheads):.2f} s per proof "
          f"({len(overheads)} model(s), {os.cpu_count()} CPU(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
