"""``hyport verify PATH``: stage 05's weight verification from the command line.

Headers, index and config always; the deeper checks only when their switch is given.
Without PATH it checks what stage 04 recorded, else the embedded tiny model. A finding of
error severity is a FAIL; a missing path, or a check that needs a checkpoint without one,
is exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from hyport_lib.checkpoint_files.findings import findings_frame
from hyport_lib.commands._stage import StageCommand, ProgressWriter
from hyport_lib.utils.files import ensure_writable
from hyport_lib.weights.checksums import checksum_name
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.show import comparison_frame, reload_frame, shards_frame
from hyport_lib.weights.stage import WeightsPlan, summarize
from hyport_lib.utils.wording import counted

#: Switches here, off unless given: a bare ``hyport verify PATH`` reads the headers in
#: milliseconds, where the notebook runs every check (the cell's defaults are on).
SWITCHES = ("full_scan", "reload", "logits_parity", "consolidate_zero", "trust_remote_code")


def _log_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-dir", default=None,
                        help="where the child processes' logs go (default: a fresh folder beside the results)")


def _with_log_dir(plan: WeightsPlan, args: argparse.Namespace) -> WeightsPlan:
    """``--log-dir``, checked writable before minutes of scanning and reloading."""
    if not args.log_dir:
        return plan
    try:
        ensure_writable(args.log_dir)
    except OSError as exc:
        raise PermissionError(exc.errno, f"--log-dir {str(args.log_dir)!r} is not a writable "
                                         f"folder ({exc.strerror})", str(args.log_dir)) from None
    return dataclasses.replace(plan, log_dir=Path(args.log_dir))


def _text(result: WeightsResult) -> str:
    """The seed's line first, the verdict last."""
    judged = summarize(result)
    n = result.counts
    out = [result.seed_line(),
           f"{result.tensor_count} tensors, {result.parameters:,} parameters "
           f"({result.parameters_without_tied:,} without tied duplicates)", "",
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
        ranks = counted(z.world_size, "rank") if z.world_size else "? ranks"
        out.append(f"ZeRO-{z.zero_stage} states {z.tag}: {ranks} "
                   f"(dp_world_size {z.dp_world_size}), DeepSpeed {z.ds_version}")
    if result.zero_compare is not None:
        for t in result.zero_compare.targets:
            out.append(f"zero_to_fp32 vs {t['folder']}: {t['matching']}/{t['compared']} identical after "
                       f"cast, max |Δ| {t['max_abs_cast']}")
        if result.zero_compare.status != "ok":
            out.append(f"zero_to_fp32: {result.zero_compare.reason}")
    out += ["", f"findings: {counted(n['error'], 'error')}, {counted(n['warning'], 'warning')}, "
                f"{counted(n['info'], 'note')}"]
    if result.findings:
        out.append(findings_frame(result.findings).to_string(index=False, max_colwidth=160))
    out.append(f"{judged.verdict}: {judged.why}")
    return "\n".join(out)


COMMAND = StageCommand(
    "weights", text=_text, positional=("weights_path",), switches=SWITCHES,
    arguments=_log_dir_argument, adjust=_with_log_dir,
    bar=lambda: ProgressWriter("weights", "B", total=lambda p: p.total_bytes, done=lambda p: p.done_bytes,
                            phase=lambda p: p.phase, unit_scale=True))
