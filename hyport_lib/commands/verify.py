"""``hyport verify PATH``: stage 05's weight verification from the command line.

The same stage as notebook 05 (:mod:`hyport_lib.weights.stage`: its ``Params`` from the
flags, then plan, run, record): the headers, index and config always; ``--full-scan``
reads every tensor (NaN/Inf, a checksum each; a progress bar on stderr); ``--reload``
loads the folder in a fresh process as the seed did (``LOAD_OK``); ``--base-path``
compares with the model before fine-tuning, ``--checkpoint-path`` with a folder that
should hold the same model (and lists its DeepSpeed ZeRO states; ``--logits-parity`` and
``--consolidate-zero`` go further, and need it). Without PATH it checks what stage 04
recorded, else the embedded tiny model, as the notebook does.
Exit status: 0 without error-severity findings, 1 with any, 2 on bad arguments (a
path that does not exist, a check that needs a checkpoint without one), 130 when
stopped (a child process is stopped first).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from hyport_lib import params
from hyport_lib.checkpoint_files.findings import findings_frame
from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.results import ensure_results_dir
from hyport_lib.utils.files import dumps_json, ensure_writable
from hyport_lib.utils.redact import scrub_obj, scrub_text
from hyport_lib.weights import stage
from hyport_lib.weights.checksums import checksum_name
from hyport_lib.weights.params import Params
from hyport_lib.weights.show import comparison_frame, reload_frame, shards_frame

NAME = "verify"
STAGE = stage.STAGE  # the stage this command runs
HELP = ("verify saved safetensors weights: headers, index, NaN/Inf, reload, comparison with a "
        "base or a checkpoint, DeepSpeed ZeRO states")

#: Switches here, off unless given: a bare ``hyport verify PATH`` reads the headers in
#: milliseconds, where the notebook runs every check (the cell's defaults are on).
SWITCHES = ("full_scan", "reload", "logits_parity", "consolidate_zero", "trust_remote_code")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    params.add_arguments(parser, Params, positional=("weights_path",), skip=SWITCHES)
    for f in params.parameter_fields(Params):
        if f.name in SWITCHES:
            parser.add_argument(f.flag, dest=f.name, action="store_true", help=f"{f.spec.doc} (off unless given)")
    parser.add_argument("--log-dir", default=None,
                        help="where the child processes' logs go (default: a fresh folder beside the results)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true", help=f"do not write the {STAGE} result")


def _text(result) -> str:
    """The result as the terminal shows it: the seed's line first, the verdict last."""
    verdict, why = result.verdict()
    n = result.counts
    out = [result.seed_line(),
           f"{len(result.inspection.tensors)} tensors, {result.inspection.parameters:,} parameters "
           f"({result.inspection.unique_parameters:,} without tied duplicates)", "",
           shards_frame(result).to_string(index=False), ""]
    if result.scan is not None:
        s = result.scan
        out += [f"full scan: {len(s.tensors)} tensors, {s.bytes_read:,} bytes in {s.seconds:.2f} s, "
                f"{len(s.nonfinite_tensors)} with NaN/Inf, checksums {checksum_name(s.checksum)}", ""]
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
    plan = stage.plan(params.from_arguments(Params, args))
    if args.log_dir:
        plan = dataclasses.replace(plan, log_dir=Path(args.log_dir))
    # Where it will write, before minutes of scanning and reloading: a results folder or
    # --log-dir that cannot take files is one line and exit 2, not a traceback at the end.
    if not args.no_record:
        ensure_results_dir()
    if args.log_dir:
        try:
            ensure_writable(args.log_dir)
        except OSError as exc:
            raise PermissionError(exc.errno, f"--log-dir {str(args.log_dir)!r} is not a writable "
                                             f"folder ({exc.strerror})", str(args.log_dir)) from None
    bar = TerminalBar("weights", "B", total=lambda p: p.total_bytes, done=lambda p: p.done_bytes,
                      phase=lambda p: p.phase, unit_scale=True)
    # Stopped: the checks that finished are shown and recorded.
    return run_showing_partial(lambda: stage.run(plan, on_progress=bar), bar,
                               lambda result: _show(result, args))


def _show(result, args: argparse.Namespace) -> int:
    if args.json:
        print(dumps_json(scrub_obj(result.to_dict()), indent=2))
    else:
        print(scrub_text(_text(result)))
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    return 1 if result.counts["error"] else 0
