"""``hyport port SRC --out DST``: a reviewed, proven port of CUDA / flash-attn model code
(:mod:`hyport_lib.port`). Exit status: 0 when the port is written and its proof PASSes,
WARNs (no model class to build) or is not run (no ``--proof``), 1 when it FAILs, 2 on
bad input.
"""

from __future__ import annotations

import argparse
import json

from hyport_lib.port.proof_run import DEFAULT_TIMEOUT_S, proof_not_run, prove_port_in_child
from hyport_lib.port.tree import port_tree, write_record
from hyport_lib.utils.printable import shortened
from hyport_lib.utils.wording import counted

SNIPPET_WIDTH = 70


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="folder of model code (or one .py file); only read")
    parser.add_argument("--out", required=True, metavar="DST",
                        help="new folder for the ported copy (must not exist, or be empty)")
    parser.add_argument("--proof", action="store_true",
                        help="prove the port: import and run the model code of SRC and DST on a "
                             "tiny model, in a child process (off unless you turn it on: SRC is "
                             "otherwise only read)")
    parser.add_argument("--proof-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="the proof's time limit; past it its process group is killed and the "
                             "proof FAILs (default %(default)g)")
    parser.add_argument("--proof-dtype", default="auto",
                        choices=("auto", "float32", "bfloat16", "float16"),
                        help="dtype of the proof; auto: float32, bfloat16 where the code keeps "
                             "flash attention to half precision")
    parser.add_argument("--proof-config", action="append", default=[], metavar="KEY=JSON",
                        help="a config field of the tiny model, its value as JSON "
                             "(repeatable), e.g. 'rope_scaling={\"type\": \"dynamic\", \"factor\": 2.0}'")
    parser.add_argument("--seed", type=int, default=0, help="seeds the proof's weights and inputs")
    parser.add_argument("--json", action="store_true", help="print port.json instead of the table")


def config_overrides(values: list[str]) -> dict:
    out = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--proof-config {value!r}: expected KEY=JSON")
        try:
            out[key.strip()] = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--proof-config {value!r}: the value is not JSON ({exc})") from exc
    return out


def format_text(result) -> str:
    out = [f"ported {result.src} -> {result.dst}: {counted(len(result.changes), 'change')} in "
           f"{counted(len(result.files_changed), 'file')}, {counted(len(result.manual), 'spot')} left for a human"]
    for change in result.changes:
        out.append(f"  {change.file}:{change.line}  {change.kind}  {shortened(change.before, SNIPPET_WIDTH)}  ->  "
                   f"{shortened(change.after, SNIPPET_WIDTH)}")
    for spot in result.manual:
        out.append(f"  LEFT {spot.file}:{spot.line}  {spot.kind}  {shortened(spot.snippet, SNIPPET_WIDTH)}: {spot.why}")
    for rel in result.generated:
        out.append(f"  added {rel}")
    for file, error in result.unparsable:
        out.append(f"  NOT PARSED {file}: {error} (copied as it was)")
    for file, why in result.not_rewritten:
        out.append(f"  NOT REWRITTEN {file}: {why}")
    for path, why in result.skipped:
        out.append(f"  SKIPPED {path}: {why}")
    for path, link_target in result.links:
        out.append(f"  LINK {path} -> {link_target} (a link inside SRC: kept as a link)")
    for path in result.removed_staging:
        out.append(f"  removed {path}: the staging folder of an earlier port that was killed")
    proof = result.proof
    if proof is None or proof.error:
        out.append(f"proof: {proof.verdict}: {proof.error}" if proof else "proof: none (nothing was rewritten)")
        return "\n".join(out)
    out += [f"proof: {proof.verdict}  {proof.model_class} ({proof.model_kind}), {proof.dtype} on {proof.device}",
            f"  reference: {proof.reference}", f"  port: {proof.ported_path}"]
    for case in proof.cases:
        numbers = "" if case.max_abs is None else f"max|diff| {case.max_abs:.3g} (bound {case.bound:.3g}), "
        if case.cosine is not None:
            numbers += f"cosine {case.cosine:.6f}, "
        tokens = "" if case.tokens_match is None else f"tokens {'identical' if case.tokens_match else 'DIFFER'}, "
        out.append(f"  {case.verdict}  {case.name}: {numbers}{tokens}{counted(case.npu_calls, 'NPU attention call')}"
                   + (f"  [{case.detail}]" if case.detail else ""))
    out += [f"  note: {note}" for note in proof.notes]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    overrides = config_overrides(args.proof_config)
    if not args.proof_timeout > 0:
        raise ValueError(f"--proof-timeout {args.proof_timeout:g}: expected seconds > 0")
    result = port_tree(args.src, args.out)
    if result.changes:
        proof = prove_port_in_child(result.src, result.dst, dtype=args.proof_dtype, seed=args.seed,
                                    config_overrides=overrides, timeout_s=args.proof_timeout) \
            if args.proof else proof_not_run(result.src, result.dst, "add --proof")
        result.proof = proof
        write_record(result)
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_text(result))
    return 1 if result.proof is not None and result.proof.verdict == "FAIL" else 0
