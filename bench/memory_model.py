"""The memory model (hyport_lib/memory) against DeepSpeed's estimators and against peaks
measured on this CPU (prints ratios; not a test).

Part 1, arithmetic only (seconds): for Qwen2.5 shapes of 0.5 B, 7 B and 72 B (sparse
checkpoints from tests/real_size.py: real headers, no data), ZeRO 0-3 x full / LoRA, with
and without an offloaded optimizer, on 8 cards: hyport's model states per card against
DeepSpeed's ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_...`` (the
arithmetic its ``*_all_cold`` functions print). DeepSpeed has no estimator for ZeRO-0/1 or
LoRA: those rows print "n/a". Its ``*_all_live`` variants, run on a meta-device model, are
printed beside for the 7 B shape, to show what they count.

Part 2 (``--measure``, minutes): SmolLM2-135M on CPU: ``hyport train`` (2 processes, a few
steps, ZeRO 0/2/3 x full/LoRA) and ``hyport infer`` (1 process), each rank's peak RSS
against the memory model's host figure for one rank (these are CPU figures, RSS).

    .venv/bin/python bench/memory_model.py [--measure] [--steps 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hyport_lib.memory.model import Workload, estimate  # noqa: E402
from hyport_lib.memory.shape import model_shape, read_model_shape  # noqa: E402
from hyport_lib.models.preflight import check_model_path  # noqa: E402
from tests.real_size import write_sparse_checkpoint  # noqa: E402

GIB = 2 ** 30
CARDS = 8


def _states(shape, workload) -> int:
    """Card bytes of the model states alone: what DeepSpeed's estimators count."""
    return sum(i.bytes for i in estimate(shape, workload).items if i.where == "card"
               and not i.what.startswith(("activations", "logits", "runtime")))


def deepspeed_card(shape, zero: int, offload: bool):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    if zero == 2:
        return estimate_zero2_model_states_mem_needs(shape.parameters, CARDS, 1, cpu_offload=offload)[1]
    if zero == 3:
        return estimate_zero3_model_states_mem_needs(shape.parameters, shape.largest_module_parameters, CARDS, 1,
                                                     cpu_offload=offload, cpu_offload_params=False)[1]
    return None


def compare_with_deepspeed(folder: Path) -> None:
    print(f"== model states per card, {CARDS} cards, bf16: hyport vs DeepSpeed (GiB) ==")
    print(f"{'shape':>6} {'ZeRO':>4} {'tune':>5} {'offload':>8} {'hyport':>8} {'DeepSpeed':>10} {'ratio':>6}")
    worst = 0.0
    for size in ("0.5b", "7b", "72b"):
        shape = read_model_shape(write_sparse_checkpoint(folder / size, size))
        for finetuning in ("full", "lora"):
            for zero in (0, 1, 2, 3):
                for offload in ((False, True) if zero >= 1 else (False,)):
                    workload = Workload("training", "npu", "bfloat16", world_size=CARDS, ranks_per_host=CARDS,
                                        zero_stage=zero, finetuning=finetuning, offload_optimizer=offload)
                    ours = _states(shape, workload)
                    theirs = deepspeed_card(shape, zero, offload) if finetuning == "full" else None
                    ratio = f"{ours / theirs:6.3f}" if theirs else "   n/a"
                    if theirs:
                        worst = max(worst, abs(ours / theirs - 1))
                    print(f"{size:>6} {zero:>4} {finetuning:>5} {str(offload):>8} {ours / GIB:8.2f} "
                          f"{(theirs / GIB if theirs else float('nan')):10.2f} {ratio}")
    print(f"largest difference where both apply: {worst:.1%} (target: within 10%)")


def all_live_on_meta(folder: Path) -> None:
    """DeepSpeed's *_all_live on a meta-device 7 B: what it counts."""
    import torch
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs_all_live
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder / "7b")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        estimate_zero2_model_states_mem_needs_all_live(model, num_gpus_per_node=CARDS)
    counted = [line for line in printed.getvalue().splitlines() if "total params" in line]
    print(f"== DeepSpeed's *_all_live on a meta-device 7 B: {counted[0].strip() if counted else '?'} "
          f"(headers: {read_model_shape(folder / '7b').parameters:,}); meta tensors share one data_ptr, so "
          "its dedupe by data_ptr keeps one ==")


def _peak_mb_of_train(out: Path, zero: int, finetuning: str, steps: int) -> float:
    cmd = [sys.executable, "-m", "hyport_lib", "train", "--device", "cpu", "--num-cards", "2", "--model-path",
           "smollm2", "--max-steps", str(steps), "--save-steps", str(steps), "--zero-stage", str(zero),
           "--finetuning-type", finetuning, "--precision", "fp32", "--max-seq-len", "256",
           "--output-dir", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return max(r["peak_memory_mb"] for r in rows if r.get("peak_memory_mb"))


def measure(steps: int) -> None:
    folder = check_model_path("smollm2")
    shape = model_shape(folder)
    print(f"== SmolLM2-135M on this CPU ({shape.parameters:,} parameters): peak RSS a rank vs the model (GiB) ==")
    print(f"{'run':<28} {'measured':>9} {'model':>7} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="hyport-bench-memory-") as scratch:
        for zero, finetuning in ((0, "full"), (2, "full"), (3, "full"), (2, "lora")):
            out = Path(scratch) / f"z{zero}-{finetuning}"
            peak = _peak_mb_of_train(out, zero, finetuning, steps) * 2 ** 20
            workload = Workload("training", "cpu", "float32", world_size=2, ranks_per_host=2, zero_stage=zero,
                                finetuning=finetuning, sequence=256, gradient_checkpointing=True)
            model = estimate(shape, workload).host_bytes_per_rank
            print(f"{f'train ZeRO-{zero} {finetuning}, 2 ranks':<28} {peak / GIB:9.2f} {model / GIB:7.2f} "
                  f"{model / peak:6.2f}")
        logs = Path(scratch) / "infer"
        # text prompts (SmolLM2 takes no image); the card's own record holds its peak
        subprocess.run([sys.executable, "-m", "hyport_lib", "infer", "--device", "cpu", "--num-cards", "1",
                        "--model-path", "smollm2", "--dtype", "float32", "--max-new-tokens", "32",
                        "--single-prompt", "What is the capital of France?", "--skip-not-applicable",
                        "--log-dir", str(logs)], check=True, capture_output=True, text=True, cwd=REPO)
        card = json.loads((logs / "card0.json").read_text())
        peak = card["peak_memory_bytes"]
        workload = Workload("inference", "cpu", "float32", new_tokens=32, sequence=64, micro_batch=2)
        model = estimate(shape, workload).host_bytes_per_rank
        print(f"{'infer, 1 process':<28} {peak / GIB:9.2f} {model / GIB:7.2f} {model / peak:6.2f}")
    print("ratio = model / measured: above 1 the model is on the safe side. CPU RSS, not an NPU's memory.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="also measure SmolLM2-135M on this CPU (minutes)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hyport-bench-shapes-") as scratch:
        compare_with_deepspeed(Path(scratch))
        all_live_on_meta(Path(scratch))
    if args.measure:
        measure(args.steps)


if __name__ == "__main__":
    main()
