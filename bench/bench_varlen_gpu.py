"""GPU benchmark of the drop-in's varlen path against every way to compute it (prints ratios).

For each mix of sequence lengths (bf16, 32 heads, head dim 128, causal), best of 5 × 20
calls of: the drop-in's ``flash_attn_varlen_func`` (which picks grouped SDPA or the fused
kernel by :func:`hyport_lib.port.generated.flash_attn_ascend.choose_varlen_path`), torch's fused varlen
kernel alone, grouped SDPA alone (one batched call per run of equal lengths) and one SDPA
call per sequence. Printed: each time in ms and the drop-in over the fastest of the
three others (target ≤ 1.10 on every mix). Needs a CUDA GPU; on other hosts it says so
and exits 0 (the CPU benchmark is ``bench/bench_varlen.py``).

    python bench/bench_varlen_gpu.py [--repeats 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

def _random_lengths(count: int, low: int, high: int, seed: int = 0) -> list[int]:
    """``count`` lengths drawn from one seeded generator (a new generator per length
    would give the same length every time)."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


MIXES = {
    "8 x 2048": [2048] * 8,
    "8 x 4096": [4096] * 8,
    "64 x 256": [256] * 64,
    "8 mixed (64..4000)": [64, 4000, 512, 1500, 3000, 128, 2048, 900],
    "16 distinct (1..1597)": [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597],
    "32 random (128..1024)": _random_lengths(32, 128, 1024),
}


def timed(fn, repeats: int, calls: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to measure (see bench/bench_varlen.py for the CPU)")
        return 0
    from hyport_lib.port.generated import flash_attn_ascend as fa
    from hyport_lib.npu_attention.flash_api import FlashAttnAPI

    api = FlashAttnAPI("sdpa")
    fused_op = fa.fused_varlen_op()
    heads, dim, scale = 32, 128, 128 ** -0.5
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; bf16, {heads} heads, "
          f"head dim {dim}, causal; best of {args.repeats} x {args.calls} calls; ms per call")
    print(f"{'lengths':24} {'drop-in':>9} {'fused':>9} {'grouped':>9} {'per-seq':>9}  {'path':8} ratio")
    worst = 0.0
    for name, lengths in MIXES.items():
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        q, k, v = (torch.randn(cu[-1], heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
        window = (None, 0)
        runs = len(fa.equal_length_runs(lengths, lengths))
        path = fa.choose_varlen_path("cuda", q.dtype, dim, 0.0, runs, False, fused_op is not None)

        def grouped():
            saved = fa.FUSED_MIN_RUNS
            fa.FUSED_MIN_RUNS = 10 ** 9
            try:
                return fa.sdpa_varlen(q, k, v, cu, cu, scale, 0.0, window)
            finally:
                fa.FUSED_MIN_RUNS = saved

        def per_sequence():
            return [fa.sdpa_dense(q[a:b][None], k[a:b][None], v[a:b][None], scale, 0.0, window)
                    for a, b in zip(cu, cu[1:])]

        times = {
            "drop-in": timed(lambda: api.flash_attn_varlen_func(q, k, v, cu_t, cu_t, max(lengths),
                                                                max(lengths), causal=True), args.repeats, args.calls),
            "fused": (timed(lambda: fa.fused_varlen(q, k, v, cu, cu, scale, window, fused_op),
                            args.repeats, args.calls) if fused_op else float("nan")),
            "grouped": timed(grouped, args.repeats, args.calls),
            "per-seq": timed(per_sequence, args.repeats, args.calls),
        }
        best = min(t for key, t in times.items() if key != "drop-in" and t == t)
        ratio = times["drop-in"] / best
        worst = max(worst, ratio)
        print(f"{name:24} " + " ".join(f"{times[k]:9.3f}" for k in ("drop-in", "fused", "grouped", "per-seq"))
              + f"  {path:8} {ratio:.2f}")
    print(f"\nworst drop-in / fastest: {worst:.2f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
