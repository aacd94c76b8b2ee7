"""Synthetic report runs and the checks the draft tests share: every number of a draft
has a recorded source, no English prose in a Chinese draft, a stage's section rendered
alone (used by the blog, held-answers, port-stage and sixth-stage tests)."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

from hyport_lib.report.blog import render_blog
from hyport_lib.report.run import PENDING, ReportRun, StageOutcome

STAGES = ["01_environment", "02_attention", "03_inference", "04_train", "05_weights"]

# --------------------------------------------------------------------------- checkers
#: A number as the drafts and the recorded files write it: thousands separators allowed,
#: not part of a word or identifier (``BF16``, hashes), so both sides tokenise alike.
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![A-Za-z0-9_])")


def numbers_in(text: str) -> list[str]:
    return [m.group(0).replace(",", "") for m in NUMBER.finditer(text)]


def _variants(value) -> set[str]:
    """The forms drafting.values.num documents: as recorded, floats to 4 significant digits
    (one decimal from 1,000 on)."""
    out = {str(value)}
    if isinstance(value, float) and math.isfinite(value):
        out.add(f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}")
    return out


def recorded_numbers(run_dir: Path) -> set[str]:
    """Every number the recorded files hold (leaves, numbers inside texts and keys, list
    lengths) plus the derivations the drafts document: the stage numbers of the stage ids
    (planned or left out);
    per attention implementation, its
    row count per verdict and its worst max_abs / bound to 3 significant digits."""
    allowed: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            allowed.add(str(len(value)))
            for key, item in value.items():
                allowed.update(numbers_in(str(key)))
                walk(item)
        elif isinstance(value, list):
            allowed.add(str(len(value)))
            for item in value:
                walk(item)
        elif isinstance(value, str):
            allowed.update(numbers_in(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            allowed.update(_variants(value))

    files = [run_dir / "run.json", *sorted((run_dir / "results").glob("*.json"))]
    for path in files:
        if path.is_file():
            try:
                walk(json.loads(path.read_text(encoding="utf-8")))
            except json.JSONDecodeError:
                allowed.update(numbers_in(path.read_text(encoding="utf-8")))  # an odd file: its text
    run_json = run_dir / "run.json"
    if run_json.is_file():  # headings and lists number the stages as their ids do ("02_attention")
        recorded_run = json.loads(run_json.read_text())
        ids = [s["stage"] for s in recorded_run["stages"]] + list(recorded_run.get("left_out") or [])
        allowed.update(stage.partition("_")[0] for stage in ids)
    attention = run_dir / "results" / "02_attention.json"
    if attention.is_file():
        rows = json.loads(attention.read_text(encoding="utf-8")).get("data", {}).get("rows", [])
        counts, ratios = defaultdict(int), defaultdict(list)
        for r in rows:
            counts[(r["backend"], r["verdict"])] += 1
            if r.get("max_abs") is not None and r.get("bound"):
                ratios[r["backend"]].append(r["max_abs"] / r["bound"])
        allowed.update(str(n) for n in counts.values())
        allowed.update(f"{max(v):.3g}" for v in ratios.values())
    return {a.replace(",", "") for a in allowed}


def unsourced(draft: str, run_dir: Path) -> list[str]:
    allowed = recorded_numbers(run_dir)
    return sorted({n for n in numbers_in(draft) if n not in allowed})


_FENCED = re.compile(r"^(`{3,}).*?^\1[ \t]*$", re.S | re.M)
_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_TARGET = re.compile(r"\]\([^)]*\)")
ENGLISH_RUN = re.compile(r"[A-Za-z][A-Za-z'’-]*(?:[ \t]+[A-Za-z][A-Za-z'’-]*){2,}")


def english_runs(markdown: str) -> list[str]:
    """Runs of three or more English words left once recorded text is taken out: fenced
    blocks, quotations, code spans (recorded values, paths, names) and link targets."""
    text = _FENCED.sub("", markdown)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(">"))
    text = _TARGET.sub("]", _CODE.sub("", text))
    return ENGLISH_RUN.findall(text)


def figure_links(markdown: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)


# --------------------------------------------------------------------------- synthetic runs
def make_run(tmp_path: Path, verdicts: dict, errors: dict | None = None, status: str = "finished",
             parameters: dict | None = None) -> ReportRun:
    stages = [StageOutcome(stage=s, verdict=verdicts.get(s, PENDING), error=(errors or {}).get(s),
                           summary="stage failed" if (errors or {}).get(s) else "")  # as the runner
              for s in STAGES]
    return ReportRun(run_id="20300101-000000-abcdef", run_dir=tmp_path, profile=None,
                     parameters=parameters if parameters is not None else {"device": "cpu", "num_cards": 2},
                     stages=stages, versions={"python": "3.11.7"}, started="2030-01-01T00:00:00",
                     status=status, host="testhost")


def write_result(run: ReportRun, stage: str, verdict: str, data: dict, headline: dict | None = None,
                 summary: str = "", provenance: dict | None = None) -> Path:
    path = Path(run.run_dir) / "results" / f"{stage}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    provenance = provenance or {"device": "cpu", "emulated": False, "label": "CPU (not an NPU measurement)"}
    path.write_text(json.dumps({"stage": stage, "verdict": verdict, "summary": summary,
                                "headline": headline or {}, "provenance": provenance, "data": data}))
    (Path(run.run_dir) / "run.json").write_text(json.dumps(run.to_dict(), default=str))
    return path


def train_data(steps: int = 5) -> dict:
    metrics = [{"step": i, "loss": 3.0 - 0.25 * i, "learning_rate": 1e-4, "tokens_per_s_per_card": 100.0 + i,
                "real_tokens_per_s_per_card": 80.0 + i} for i in range(1, steps + 1)]
    return {"status": "ok", "exit_code": 0, "wall_s": 12.5, "why": f"{steps} steps, exit code 0",
            "plan": {"world_size": 2, "nproc_per_node": 2, "precision": "bf16", "attn_implementation": "hyport_torch",
                     "deepspeed": {"zero_stage": 2},
                     "params": {"max_steps": steps, "per_device_train_batch_size": 1,
                                "gradient_accumulation_steps": 1, "gradient_checkpointing": True,
                                "save_steps": steps, "dataset_path": "", "packing": True, "max_seq_len": 512},
                     "dataset": {"path": "/data/smoke.json", "total": 14, "good": 14, "samples": 14,
                                 "skipped": 0, "truncated": 0, "tokens": 763, "label_tokens": 194}},
            "summary": {"steps": steps, "first_loss": 2.75, "last_loss": 1.75, "mean_loss": 2.2513147473,
                        "last_step": steps, "last_loss_step": steps, "mean_step_s": 0.2211207,
                        "tokens_per_s_per_card": 2315.476660065615, "skipped_steps": 0},
            "worker": {"train_metrics": {"train_loss": 2.2513147473}},
            "final_dir": "/out/smoke", "last_checkpoint": f"/out/smoke/checkpoint-{steps}",
            "metrics": metrics}


def stage_draft(tmp_path: Path, stage: str, data: dict, lang: str = "en") -> str:
    """The section of ``stage`` (``04_train``) in a draft of a run that recorded ``data`` for it."""
    folder = tmp_path / f"{stage}-{lang}-{len(list(tmp_path.glob(f'{stage}-{lang}-*')))}"
    folder.mkdir(parents=True)
    run = make_run(folder, {stage: "PASS"})
    write_result(run, stage, "PASS", data)
    return render_blog(run, lang).split(f"\n## {stage[:2]} ")[1].split("\n## ")[0]
