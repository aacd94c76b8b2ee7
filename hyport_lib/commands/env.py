"""``hyport env``: stage 01's environment check from the command line. ``--host-root TREE``
judges a copy of a host's or container's folders instead (``docs/containers.md``);
``--compare A.json B.json`` sets two hosts' records side by side (exit 1 when a field every
node of a job must share differs, 2 for a file that is no stage-01 record).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from hyport_lib.commands._stage import StageCommand
from hyport_lib.environment.host_compare import HostComparison, compare_hosts, read_environment_record
from hyport_lib.environment.stage import report_text
from hyport_lib.utils.redact import scrub_text


def _compare_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                        help="compare two hosts' results/01_environment.json (run nothing): exit 1 when "
                             "torch, torch_npu, CANN, driver, firmware, transformers, deepspeed, accelerate, python or "
                             "an HCCL setting the ranks share differs")


def comparison_text(comparison: HostComparison) -> str:
    lines = [f"A: {comparison.a_path}", f"B: {comparison.b_path}", "",
             comparison.frame().to_string(index=False), ""]
    bad = comparison.mismatched
    if bad:
        lines.append(f"{len(bad)} of the fields every node must share {'differs' if len(bad) == 1 else 'differ'}: "
                     f"{', '.join(r.field for r in bad)} (≠; ~ marks a difference allowed between hosts)")
    else:
        shared = sum(r.must_match for r in comparison.rows)
        lines.append(f"all {shared} fields every node must share agree" +
                     (" (~ marks a difference allowed between hosts)" if any(r.differs for r in comparison.rows)
                      else ""))
    return "\n".join(lines)


@dataclass(frozen=True)
class EnvCommand(StageCommand):
    """The stage command, or with ``--compare`` the comparison of two records alone."""

    def run(self, args: argparse.Namespace) -> int:
        if not args.compare:
            return super().run(args)
        a_path, b_path = args.compare
        comparison = compare_hosts(read_environment_record(a_path), read_environment_record(b_path), a_path, b_path)
        print(scrub_text(comparison_text(comparison)))
        return 1 if comparison.mismatched else 0


COMMAND = EnvCommand("environment", text=lambda report: report_text(report).rstrip("\n"),
                     arguments=_compare_argument)
