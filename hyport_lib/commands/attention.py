"""``hyport attention``: the attention numerics comparison from the command line.

Prints the case x backend table against the float64 reference, the model-level check
(eager vs swapped attention on the model) and the static scan's counts; records the
stage result; exits 1 when any row or the model check FAILs.
"""

from __future__ import annotations

import argparse

NAME = "attention"
HELP = "Compare attention backends (NPU / emulated / sdpa / eager) with a float64 reference."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true", help="run the bigger grid")
    parser.add_argument("--json", metavar="OUT", help="also write all rows as JSON to OUT")
    parser.add_argument("--code-path", default="", metavar="P",
                        help="folder or file to scan for CUDA / flash-attn code "
                             "(default: a small planted example)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or npu")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32",
                        help="comma-separated dtypes of the grid")
    parser.add_argument("--model-path", default="tiny",
                        help="model for the eager-vs-swapped check ('tiny', a folder, or "
                             "'none' to skip it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flash-attn-version", default=None, metavar="V",
                        help="the flash-attn version whose API the drop-in and shim serve (the "
                             "version the model code pins; unpad_input returns 4 values before "
                             "2.7); default: the shim's")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="the model check loads the checkpoint's own model code, with the "
                             "flash_attn shim in place for it (off by default)")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from hyport_lib.attention import stage
    from hyport_lib.attention.show import comparison_table, model_table
    from hyport_lib.utils.files import atomic_write_text, dumps_json

    from hyport_lib.results import ensure_results_dir

    ensure_results_dir()
    dtypes = [d.strip() for d in str(args.dtypes).split(",") if d.strip()]
    result = stage.run(device=args.device, seed=args.seed, full=args.full, dtypes=dtypes,
                       code_path=args.code_path, model_path=args.model_path,
                       flash_attn_version=args.flash_attn_version,
                       trust_remote_code=args.trust_remote_code)
    comparison, model, scan = result.comparison, result.model, result.scan
    with pd.option_context("display.width", 250, "display.max_rows", None,
                           "display.max_columns", None, "display.max_colwidth", 90):
        print(comparison_table(comparison).drop(columns=["source"]).to_string(index=False))
        print()
        for b in comparison.backends:
            print(f"backend {b['name']}: {b['source']}")
        for note in comparison.notes:
            print(f"note: {note}")
        if model is not None:
            print()
            print(model_table(model).to_string(index=False))
    if scan is not None:
        print(f"\nscan of {result.scanned_path}: {scan.files_scanned} files, {len(scan.hits)} "
              f"findings {scan.counts()}")
    stage.record(result)
    summary = stage.summarize(result)
    if args.json:
        payload = {"verdict": summary.verdict, "summary": summary.summary,
                   "rows": comparison.rows, "backends": comparison.backends,
                   "notes": comparison.notes, "model": model.to_dict() if model else None}
        atomic_write_text(args.json, dumps_json(payload, indent=1))
    print(f"\n{summary.verdict}: {summary.summary}")
    return 1 if summary.verdict == "FAIL" else 0
