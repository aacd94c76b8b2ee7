"""The zoo matrix: every tiny real architecture of tests/zoo.py through every stage, as a
user runs them (the ``hyport`` commands, fresh processes), with the time of each cell.

Stages (columns): 02's model check (``hyport attention --model-path``), 03 (``hyport
infer``, one card), 04 packed, 04 padded and 04 LoRA (``hyport train``: 2 steps, ZeRO-2,
2 processes), 05 (``hyport verify --reload`` on the padded run's weights). The padded run
of a VLM trains on two records, one with an image and one without, so that every step one
of the two ranks holds a text-only batch (the case that aborted DeepSpeed before).

A cell is PASS, or ``refused`` with the one line hyport printed (exit 2: a documented
refusal, e.g. packing for Gemma3), or FAIL with its last line; a traceback is always a
FAIL. Not a test: a report to read (and to quote).

    python bench/zoo_matrix.py [--only qwen2_vl,gemma3] [--stages attention,infer]
                               [--device cpu|cuda] [--zoo-dir DIR] [--out matrix.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from zoo import ZOO_NAMES, build_zoo, mixed_dataset, zoo_entry  # noqa: E402

STAGES = ("attention", "infer", "train_packed", "train_padded", "train_lora", "verify")
TITLES = {"attention": "02 model check", "infer": "03 infer", "train_packed": "04 packed",
          "train_padded": "04 padded", "train_lora": "04 LoRA", "verify": "05 verify"}


def hyport(*args: str, timeout: float = 900) -> tuple[int, str, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "hyport_lib", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = -1, f"timed out after {timeout:g} s\n{exc.stdout or ''}"
    return code, text, time.perf_counter() - started


def verdict(code: int, text: str) -> tuple[str, str]:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1][:160] if lines else ""
    if "Traceback (most recent call last)" in text:
        return "FAIL", f"traceback: {last}"
    if code == 0:
        return "PASS", ""
    if code == 2:
        return "refused", last
    return "FAIL", f"exit {code}: {last}"


def model_cell(stage: str, name: str, model: Path, out: Path, device: str) -> tuple[str, str, float]:
    """02's model check or 03's inference."""
    if stage == "attention":
        code, text, seconds = hyport("attention", "--device", device, "--dtypes", "[float32]",
                                     "--model-path", str(model), "--json", str(out.with_suffix(".json")))
        if code == 0:
            model_check = json.loads(out.with_suffix(".json").read_text()).get("model") or {}
            if model_check.get("verdict") == "REFUSED":  # said by the swap, with its reason
                return "refused", f"model check REFUSED: {str(model_check.get('detail'))[:160]}", seconds
            if model_check.get("verdict") != "PASS":
                return "FAIL", f"model check {model_check.get('verdict')}: {model_check.get('detail')}", seconds
            packed = model_check.get("packed_max_abs_logits")
            return "PASS", (f"{model_check.get('swapped_calls')} swapped calls"
                            + (f"; packed row {model_check.get('packed_tokens')} tokens, max |Δ| {packed:.1e}"
                               if isinstance(packed, (int, float)) else "")), seconds
        return (*verdict(code, text), seconds)
    if stage == "infer":
        code, text, seconds = hyport("infer", "--device", device, "--model-path", str(model),
                                     "--num-cards", "1", "--max-new-tokens", "4", "--no-record")
        state, why = verdict(code, text)
        marker = "Not applicable to this model: "
        if state == "PASS" and marker in text:
            parts = text.split(marker, 1)[1].splitlines()[0]
            why = ", ".join(label for test, label in (
                ("text-only model", "images n/a (text-only)"), ("needs an image", "text-only prompt n/a"),
                ("video processor", "video n/a (no torchvision)")) if test in parts)
        return state, why, seconds
    raise ValueError(f"not a model stage: {stage!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--zoo-dir", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ZOO_NAMES)
    stages = [s for s in args.stages.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="hyport-zoo-matrix-"))
    started = time.perf_counter()
    zoo = build_zoo(Path(args.zoo_dir) if args.zoo_dir else work / "zoo", names)
    mixed = mixed_dataset(work / "mixed")
    print(f"zoo of {len(names)} built in {time.perf_counter() - started:.1f} s under {work}", flush=True)
    rows = []
    for name in names:
        cells = {}
        for stage in stages:
            state, why, seconds = cell(stage, name, zoo[name], work, args.device, mixed)
            cells[stage] = (state, why, seconds)
            print(f"{name:16} {TITLES[stage]:15} {state:8} {seconds:6.1f} s  {why}", flush=True)
        rows.append((name, cells))
    table = render(rows, stages, time.perf_counter() - started, args.device)
    print(table)
    if args.out:
        Path(args.out).write_text(table, encoding="utf-8")
    return 0 if all(c[0] != "FAIL" for _, cells in rows for c in cells.values()) else 1


def cell(stage: str, name: str, model: Path, work: Path, device: str, mixed: Path) -> tuple[str, str, float]:
    out = work / name / stage
    out.parent.mkdir(parents=True, exist_ok=True)
    if stage in ("attention", "infer"):
        return model_cell(stage, name, model, out, device)
    entry = zoo_entry(name)
    train = ["train", "--model-path", str(model), "--max-steps", "2", "--zero-stage", "2",
             "--num-cards", "2", "--device", device, "--no-record", "--output-dir", str(out)]
    if stage == "train_packed":
        code, text, seconds = hyport(*train, "--packing", "true")
    elif stage == "train_padded":
        # VLMs that take text-only prompts: one rank text-only every step.
        data = ["--dataset-path", str(mixed)] if entry.multimodal and entry.chat_template else []
        code, text, seconds = hyport(*train, "--packing", "false", *data)
    elif stage == "train_lora":
        code, text, seconds = hyport(*train, "--packing", "false", "--finetuning-type", "lora")
    elif stage == "verify":
        weights = work / name / "train_padded"
        if not (weights / "config.json").is_file():
            return "skipped", "no padded run weights", 0.0
        code, text, seconds = hyport("verify", str(weights), "--reload", "--no-record")
    else:
        raise ValueError(f"--stages: unknown stage {stage!r}; expected {', '.join(STAGES)}")
    state, why = verdict(code, text)
    if state == "PASS" and stage == "train_padded" and entry.multimodal and entry.chat_template:
        why = "a text-only rank every step"
    return state, why, seconds


def render(rows, stages, total_s: float, device: str) -> str:
    head = "| architecture | " + " | ".join(TITLES[s] for s in stages) + " |"
    lines = [f"Zoo matrix on {device} (2-step ZeRO-2 trainings on 2 processes); total {total_s:.0f} s", "",
             head, "|" + "---|" * (len(stages) + 1)]
    notes = []
    for name, cells in rows:
        parts = []
        for stage in stages:
            state, why, seconds = cells[stage]
            parts.append(f"{state} {seconds:.0f} s" + (f" ({why})" if why and state == "PASS" else ""))
            if why and state != "PASS":
                notes.append(f"- {name} / {TITLES[stage]}: {state}: {why}")
        lines.append(f"| {name} | " + " | ".join(parts) + " |")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


if __name__ == "__main__":
    sys.exit(main())
