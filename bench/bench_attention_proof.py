"""Benchmark the proof before launch (prints times and ratios; not a test).

For every zoo architecture (tests/zoo.py) and both batch kinds (packed, padded), the
training plan's attention decision (:func:`hyport_lib.proof.choice.choose_attention`:
the first batch from the bundled smoke set, the model shrunk from its config, eager vs the
swap forward and backward) is timed cold (an empty proof cache) and again with the cache
filled, side by side in one run. Target: the cold proof ≤ 10 s per launch on 2 cores; the
cached one a small fraction of it. Decisions that refuse (packing refused by the model's
traits, a swap the proof refuses, a processor that needs torchvision) are printed with their
one line.

    python bench/bench_attention_proof.py [--only llama,qwen2_vl] [--zoo-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from zoo import ZOO_NAMES, build_zoo  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--zoo-dir", default="", help="where the zoo is built (default: a temporary folder)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ZOO_NAMES)
    with tempfile.TemporaryDirectory(prefix="hyport-bench-proof-") as scratch:
        os.environ["HYPORT_CACHE"] = str(Path(scratch) / "cache")  # an empty proof cache
        # Imported after HYPORT_CACHE is set: the cache folder is read from it.
        import torch

        from hyport_lib.models.loading import load_processor
        from hyport_lib.proof.choice import TRAINING, choose_attention
        from hyport_lib.train.dataset import load_dataset
        from hyport_lib.train.packing import proof_batches
        from hyport_lib.train.params import Params
        from hyport_lib.train.smoke_data import write_smoke_dataset

        torch.set_num_threads(min(2, os.cpu_count() or 1))
        zoo = build_zoo(args.zoo_dir or Path(scratch) / "zoo", names)
        records = load_dataset(write_smoke_dataset(Path(scratch) / "data")).records
        print(f"{'model':16} {'batch':7} {'cold s':>7} {'cached s':>9} {'ratio':>7}  verdict")
        worst = 0.0
        for name in names:
            for packing in (True, False):
                params = Params(model_path=str(zoo[name]), packing=packing, attn_implementation="hyport_torch")
                line = f"{name:16} {'packed' if packing else 'padded':7}"
                try:
                    loaded = load_processor(str(zoo[name]))

                    def decide():
                        return choose_attention(params.attn_implementation, "cpu", TRAINING, str(zoo[name]),
                                                lambda folder: proof_batches(params, folder, loaded, records, []),
                                                packing=packing)

                    started = time.perf_counter()
                    choice = decide()
                    cold = time.perf_counter() - started
                    started = time.perf_counter()
                    again = decide()
                    cached = time.perf_counter() - started
                except ValueError as exc:
                    print(f"{line} {'-':>7} {'-':>9} {'-':>7}  refused: {str(exc)[:110]}")
                    continue
                worst = max(worst, cold)
                verdict = choice.proof.verdict if choice.proof else "no swap"
                assert again.proof is None or again.proof.cached
                print(f"{line} {cold:7.2f} {cached:9.3f} {cached / cold:7.3f}  {verdict}")
        print(f"slowest cold proof: {worst:.2f} s (target ≤ 10 s on 2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
