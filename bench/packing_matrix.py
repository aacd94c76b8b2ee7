"""Packing on every architecture of the zoo (tests/zoo.py): stage 04's plan with
``packing=true``, in-process, each with a fresh proof cache. For each: the packed verdict
(proven per sample, or refused with the reason: the layer named), the isolation figure with
eager and with the swap (max |Δ logits| of a sample when another one changes or it moves,
and the float-noise bound), and the proof's cost. CPU, float32 figures. Not a test: a
report to read (and to quote).

    python bench/packing_matrix.py [--only lfm2,llama] [--zoo-dir DIR] [--out matrix.md]
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

from hyport_lib.train import stage  # noqa: E402
from hyport_lib.train.params import Params  # noqa: E402


def one(name: str, folder: Path, scratch: Path) -> dict:
    os.environ["HYPORT_CACHE"] = str(scratch / "cache" / name)
    started = time.perf_counter()
    row = {"name": name, "verdict": "", "eager": "", "swap": "", "bound": "", "proof": None, "seconds": 0.0}
    try:
        plan = stage.plan(Params(model_path=str(folder), output_dir=str(scratch / "out" / name), packing=True))
        proof = plan.attention_proof
        row["verdict"] = "proven per sample" if proof and proof.passed else f"FAIL: {proof.reason if proof else '?'}"
        isolation = proof.isolation if proof else []
        row["proof"] = proof.seconds if proof else None
    except ValueError as exc:  # a plan refusal: one line, exit 2 through the CLI
        proof = getattr(exc, "proof", None)  # PackingRefused carries the proof that found it
        row["verdict"] = f"refused: {_reason(str(exc), proof)}"
        isolation = proof.isolation if proof else []
        row["proof"] = proof.seconds if proof else None
    for check in isolation:
        key = "eager" if check.attention == "eager" else "swap"
        row[key] = ("not checked" if check.unchecked else "non-finite" if not check.finite else
                    f"{check.leak:.1e}{'' if check.passed else ' (over)'}")
        if key == "swap":
            row["bound"] = f"{check.bound:.1e}"
    row["seconds"] = time.perf_counter() - started
    return row


def _reason(message: str, proof) -> str:
    """The refusal's cause, short enough for a table cell."""
    leak = next((i for i in (proof.isolation if proof else [])[::-1] if not i.passed), None)
    if proof is not None and proof.packing_leak and leak is not None:
        return f"{leak.module} ({leak.module_class}) — {leak.how}"
    if proof is not None and proof.eager_non_finite:
        return f"the model's own gradients non-finite on packed rows with eager too ({proof.eager_non_finite})"
    message = message.removeprefix("packing=True: ")
    return message if len(message) <= 160 else message[:157] + "..."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated zoo names")
    parser.add_argument("--zoo-dir", default="", help="an existing zoo folder (built if absent)")
    parser.add_argument("--out", default="", help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(ZOO_NAMES)
    with tempfile.TemporaryDirectory(prefix="hyport-packing-matrix-") as scratch:
        zoo = build_zoo(Path(args.zoo_dir) if args.zoo_dir else Path(scratch) / "zoo", names)
        lines = ["| model | packed (stage 04 plan) | isolation, eager | isolation, swap | swap's bound | proof s | "
                 "plan s |", "|---|---|---|---|---|---|---|"]
        for name in names:
            row = one(name, zoo[name], Path(scratch))
            proof = "—" if row["proof"] is None else f"{row['proof']:.1f}"
            lines.append(f"| {row['name']} | {row['verdict']} | {row['eager'] or '—'} | {row['swap'] or '—'} | "
                         f"{row['bound'] or '—'} | {proof} | {row['seconds']:.1f} |")
            print(lines[-1], flush=True)
    table = ("\n".join(lines) + "\n\nCPU, float32 (the proof never touches a card). Isolation: the largest "
             "|Δ logits| of a sample when another sample's tokens change or it moves within its row, with "
             "eager and with hyport's attention ((over): above its float-noise bound); the swap's bound is "
             "the one that decides. proof s: the proof (uncached, both attentions, isolation included); "
             "plan s: the whole plan (dataset, processor).\n")
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
