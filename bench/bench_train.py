"""Benchmark stage 04's launch against a bare torchrun script (prints ratios; not a test).

Both sides train the same model on the same packed rows with the same DeepSpeed JSON
(hyport's run writes it; the bare script reads that file), the same TrainingArguments
and the same number of steps, on the same number of processes under ``torchrun``:

* **hyport**: ``stage.plan`` + ``stage.run`` — the agent with its guard, the per-attempt
  store prefix, the counting Trainer, the metrics callback (two all-reduces per step and
  a JSON line), checkpoint markers, the launcher polling the metrics file;
* **bare**: a plain ``torchrun`` of a script with the HF ``Trainer`` and a callback that
  only times steps.

Printed: the mean step time of each (steps after ``--warmup`` left out; the same
definition on both sides), their ratio hyport / bare (target ≤ 1.05), the peak RSS of a
rank on each side (RSS: this is the CPU) and the wall times. Runs alternate (bare,
hyport, bare, ...) so that other load on the host hits both alike; the median over
``--repeats`` is reported.

    .venv/bin/python bench/bench_train.py [--repeats 3] [--steps 30] [--cards 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hyport_lib.train import stage
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import free_port

REPO = Path(__file__).resolve().parents[1]

BARE_SCRIPT = r'''
import json, os, resource, sys, time
import torch, torch.distributed as dist
spec = json.loads(os.environ["BENCH_SPEC"])
from transformers import AutoModelForImageTextToText, AutoProcessor, Trainer, TrainerCallback, TrainingArguments
import importlib
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # as hyport does on CPU
from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.packing import COUNT_KEYS, make_collator, training_rows
from hyport_lib.train.samples import Encoder
name = register_hyport_attention("sdpa")
processor = AutoProcessor.from_pretrained(spec["model_path"])
model = AutoModelForImageTextToText.from_pretrained(spec["model_path"], attn_implementation=name)
encoder = Encoder(processor, spec["max_seq_len"])
samples = [encoder.encode(r)[0] for r in load_dataset(spec["dataset_path"]).records]
rows = training_rows(samples, spec["max_seq_len"], True)
collate = make_collator(encoder.pad_id, spec["max_seq_len"], True)
def collator(batch):
    out = collate(batch)
    for key in COUNT_KEYS:
        out.pop(key)
    return out
times = []
class Timer(TrainerCallback):  # hyport's definition: from the end of the step before
    t = None
    def on_step_begin(self, *a, **k):
        if self.t is None: self.t = time.perf_counter()
    def on_step_end(self, *a, **k):
        now = time.perf_counter(); times.append(now - self.t); self.t = now
args = TrainingArguments(output_dir=spec["output_dir"], use_cpu=True, deepspeed=spec["deepspeed"],
    bf16=True, per_device_train_batch_size=1, gradient_accumulation_steps=1,
    max_steps=spec["steps"], learning_rate=1e-4, lr_scheduler_type="cosine", logging_steps=1,
    save_strategy="no", gradient_checkpointing=True, report_to="none", dataloader_num_workers=0,
    remove_unused_columns=False, disable_tqdm=True, seed=0)
Trainer(model=model, args=args, train_dataset=rows, data_collator=collator, callbacks=[Timer()]).train()
peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
dist.all_reduce(peak, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    with open(spec["result"], "w") as fh:
        json.dump({"step_s": times, "peak_rss_mb": peak.item()}, fh)
dist.barrier(); dist.destroy_process_group(); os._exit(0)
'''


def mean_after(values: list[float], warmup: int) -> float:
    kept = values[warmup:] or values
    return sum(kept) / len(kept)


def run_hyport(folder: Path, steps: int, cards: int, warmup: int) -> dict:
    started = time.monotonic()
    result = stage.run(stage.plan(Params(output_dir=str(folder), max_steps=steps, save_steps=100000,
                                         num_cards=cards, resume_from="none", device="cpu",
                                         throughput_warmup_steps=warmup)))
    if result.status != "ok":
        raise RuntimeError(f"hyport run failed: {result.reason}")
    return {"wall_s": time.monotonic() - started,
            "step_s": mean_after([r["step_s"] for r in result.metrics], warmup),
            "peak_rss_mb": result.summary.peak_memory_mb, "plan": result.plan}


def run_bare(folder: Path, plan: dict, steps: int, cards: int, warmup: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "bare_train.py"
    script.write_text(BARE_SCRIPT)
    result = folder / "bare_result.json"
    spec = {"model_path": plan["model_path"], "dataset_path": plan["dataset_path"],
            "max_seq_len": plan["config"]["max_seq_len"], "deepspeed": plan["deepspeed_config_path"],
            "output_dir": str(folder / "out"), "steps": steps, "result": str(result)}
    env = {**os.environ, "BENCH_SPEC": json.dumps(spec), "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // cards))}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cards),
                           "--master-port", str(_free_port()), str(script)], env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"bare torchrun failed ({done.returncode}):\n{done.stderr[-3000:]}")
    data = json.loads(result.read_text())
    return {"wall_s": time.monotonic() - started, "step_s": mean_after(data["step_s"], warmup),
            "peak_rss_mb": data["peak_rss_mb"]}


def _free_port() -> int:
    return free_port()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cards", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    hyport_runs, bare_runs = [], []
    with tempfile.TemporaryDirectory(prefix="hyport-bench-train-") as tmp:
        for i in range(args.repeats):
            first = run_hyport(Path(tmp) / f"hyport-warm{i}", 2, args.cards, 0) if i == 0 else None
            plan = (first or hyport_runs[-1])["plan"]
            bare_runs.append(run_bare(Path(tmp) / f"bare{i}", plan, args.steps, args.cards, args.warmup))
            hyport_runs.append(run_hyport(Path(tmp) / f"hyport{i}", args.steps, args.cards, args.warmup))
            print(f"repeat {i + 1}: step s hyport {hyport_runs[-1]['step_s']:.4f} / bare "
                  f"{bare_runs[-1]['step_s']:.4f}", flush=True)

    def median(runs, key):
        return statistics.median(r[key] for r in runs)

    h, b = median(hyport_runs, "step_s"), median(bare_runs, "step_s")
    print(f"\nsetup: {args.cards} CPU processes, {args.steps} steps, ZeRO-2 bf16, packed rows; "
          f"the first {args.warmup} steps of each run left out; median of {args.repeats}")
    print(f"mean step time   hyport {h:.4f} s   bare {b:.4f} s   ratio {h / b:.3f}  (target <= 1.05)")
    print(f"peak RSS / rank  hyport {median(hyport_runs, 'peak_rss_mb'):.0f} MB   bare "
          f"{median(bare_runs, 'peak_rss_mb'):.0f} MB")
    print(f"wall time        hyport {median(hyport_runs, 'wall_s'):.1f} s   bare "
          f"{median(bare_runs, 'wall_s'):.1f} s  (start-up, data preparation, saving included)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
