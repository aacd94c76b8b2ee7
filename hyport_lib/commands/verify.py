"""``hyport verify PATH``: stage 05's weight verification from the command line.

The same stage function as notebook 05 (:func:`hyport_lib.weights.stage.run`): the
headers, index and config always; ``--full-scan`` reads every tensor (NaN/Inf, a
checksum each; a progress bar on stderr); ``--reload`` loads the folder in a fresh
process as the seed did (``LOAD_OK``); ``--base`` compares with the model before
fine-tuning, ``--checkpoint`` with a folder that should hold the same model (and lists
its DeepSpeed ZeRO states; ``--logits`` and ``--consolidate`` go further).
Exit status: 0 without error-severity findings, 1 with any, 2 on bad arguments (a
path that does not exist), 130 when stopped (a child process is stopped first).
"""

from __future__ import annotations

import argparse
import sys

from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.utils.files import dumps_json

NAME = "verify"
HELP = ("verify saved safetensors weights: headers, index, NaN/Inf, reload, comparison with a "
        "base or a checkpoint, DeepSpeed ZeRO states")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="a checkpoint folder, or one .safetensors file")
    parser.add_argument("--full-scan", action="store_true",
                        help="read every tensor: NaN/Inf and a checksum per tensor")
    parser.add_argument("--checksum", default="crc32", choices=("crc32", "sha256"),
                        help="checksum of the full scan (default crc32)")
    parser.add_argument("--reload", action="store_true",
                        help="from_pretrained in a fresh process (LOAD_OK, parameters, keys)")
    parser.add_argument("--base", metavar="PATH", default=None,
                        help="the model before fine-tuning: training must have changed the weights")
    parser.add_argument("--checkpoint", metavar="PATH", default=None,
                        help="a folder that should hold the same model (e.g. the last checkpoint-N/)")
    parser.add_argument("--logits", action="store_true",
                        help="with --checkpoint: compare logits on a fixed prompt (loads both models)")
    parser.add_argument("--consolidate", action="store_true",
                        help="with --checkpoint: consolidate its ZeRO states with zero_to_fp32 and compare")
    parser.add_argument("--dtype", default="bfloat16", choices=("auto", "float32", "bfloat16", "float16"),
                        help="dtype of the reload (default bfloat16, as the seed)")
    parser.add_argument("--attn-implementation", default="eager", help="attention of the reload (default eager)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let transformers run the checkpoint's own code (off by default)")
    parser.add_argument("--reload-timeout-s", type=float, default=600.0, metavar="SECONDS",
                        help="limit of each child process: reload, logits, consolidation (default 600)")
    parser.add_argument("--log-dir", default=None, help="where the child processes' logs go")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true", help="do not write the 05_weights result")


def _text(result) -> str:
    from hyport_lib.checkpoint_files.findings import findings_frame
    from hyport_lib.weights.show import comparison_frame, reload_frame, shards_frame

    verdict, why = result.verdict()
    n = result.counts
    out = [result.seed_line(),
           f"{len(result.inspection.tensors)} tensors, {result.inspection.parameters:,} parameters "
           f"({result.inspection.unique_parameters:,} without tied duplicates)", "",
           shards_frame(result).to_string(index=False), ""]
    if result.scan is not None:
        s = result.scan
        out += [f"full scan: {len(s.tensors)} tensors, {s.bytes_read:,} bytes in {s.seconds:.2f} s, "
                f"{len(s.nonfinite_tensors)} with NaN/Inf ({s.checksum})", ""]
    if result.reload is not None:
        out += [reload_frame(result).to_string(index=False), ""]
    for c in result.comparisons:
        out += [f"against the {c.role} {c.other_path}: {c.changed} changed of {c.compared} compared",
                comparison_frame(c, limit=10).to_string(index=False), ""]
    if result.parity is not None:
        p = result.parity
        out.append(f"logits parity: {p.status}, max |Δ| {p.max_abs_diff}, top-1 {p.top1_agreement}, "
                   f"max KL {p.max_kl}" if p.status == "ok" else f"logits parity: {p.reason}")
    if result.zero is not None and result.zero.present:
        z = result.zero
        out.append(f"ZeRO-{z.zero_stage} states {z.tag}: {z.world_size} rank(s) "
                   f"(dp_world_size {z.dp_world_size}), DeepSpeed {z.ds_version}")
    if result.zero_compare is not None:
        for t in result.zero_compare.targets:
            out.append(f"zero_to_fp32 vs {t['folder']}: {t['matching']}/{t['compared']} identical after "
                       f"cast, max |Δ| {t['max_abs_cast']}")
        if result.zero_compare.status != "ok":
            out.append(f"zero_to_fp32: {result.zero_compare.reason}")
    out += ["", f"findings: {n['error']} error(s), {n['warning']} warning(s), {n['info']} note(s)"]
    if result.findings:
        with_width = findings_frame(result.findings)
        out.append(with_width.to_string(index=False, max_colwidth=160))
    out.append(f"{verdict}: {why}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from hyport_lib.weights import stage

    # A flag that cannot apply is a usage error, not a silent PASS.
    for flag, given in (("--logits", args.logits), ("--consolidate", args.consolidate)):
        if given and not args.checkpoint:
            raise ValueError(f"{flag} compares with a checkpoint: give --checkpoint PATH")

    # Where it will write, before minutes of scanning and reloading: a results folder or
    # --log-dir that cannot take files is one line and exit 2, not a traceback at the end.
    if not args.no_record:
        from hyport_lib.results import ensure_results_dir

        ensure_results_dir()
    if args.log_dir:
        from hyport_lib.utils.files import ensure_writable

        try:
            ensure_writable(args.log_dir)
        except OSError as exc:
            raise PermissionError(exc.errno, f"--log-dir {str(args.log_dir)!r} is not a writable "
                                             f"folder ({exc.strerror})", str(args.log_dir)) from None
    bar = TerminalBar("weights", "B", total=lambda p: p.total_bytes, done=lambda p: p.done_bytes,
                      phase=lambda p: p.phase, unit_scale=True)

    def verification():
        return stage.run(
            args.path, base_path=args.base, checkpoint_path=args.checkpoint,
            full_scan=args.full_scan, reload=args.reload, logits_parity=args.logits,
            consolidate_zero=args.consolidate, dtype=args.dtype,
            attn_implementation=args.attn_implementation, trust_remote_code=args.trust_remote_code,
            reload_timeout_s=args.reload_timeout_s, checksum=args.checksum, on_progress=bar,
            log_dir=args.log_dir, source="hyport verify")

    # Stopped: the checks that finished are shown and recorded.
    return run_showing_partial(verification, bar, lambda result: _show(result, args))


def _show(result, args) -> int:
    from hyport_lib.utils.redact import scrub_obj, scrub_text
    from hyport_lib.weights import stage

    if args.json:
        print(dumps_json(scrub_obj(result.to_dict()), indent=2))
    else:
        print(scrub_text(_text(result)))
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    return 1 if result.counts["error"] else 0
