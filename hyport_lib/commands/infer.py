"""``hyport infer``: stage 03's N-card inference grid from the command line, a progress bar
instead of the live table. A card that failed, timed out or was stopped, or no card run,
is a FAIL; busy cards skipped are not. With ``--nnodes``, node 0 prints the merged grid of
every host (a node that never reported is a FAIL), a node > 0 its own cards.
"""

from __future__ import annotations

from hyport_lib.commands._stage import StageCommand, ProgressWriter
from hyport_lib.inference.grid import GridResult, InferencePlan
from hyport_lib.inference.show import compact_frame, hosts_frame
from hyport_lib.inference.stage import summarize


def _status_counts(progress) -> str:
    counts = progress.frame["status"].value_counts().to_dict()
    said = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{said}, waiting for {progress.waiting}" if progress.waiting else said


def _plan_lines(plan: InferencePlan) -> list[str]:
    # what the plan decided: the attention, host RAM, the attention's proof
    return [f"hyport infer: {line}" for line in (f"attention {plan.config.attn_implementation}", *plan.notes)]


def _text(result: GridResult) -> str:
    hosts = [hosts_frame(result).to_string(index=False, na_rep=""), ""] if result.merged else []
    return "\n".join([
        compact_frame(result.frame).round(3).to_string(index=False, na_rep=""), "", *hosts,
        summarize(result).summary,
        f"logs: {result.log_dir}   wall {result.wall_s:.1f}s   ({result.provenance.label})"])


COMMAND = StageCommand(
    "inference", text=_text, plan_lines=_plan_lines,
    bar=lambda: ProgressWriter("cards", "card", total=lambda p: p.total, done=lambda p: p.done,
                            postfix=_status_counts,
                            # a bar of its own while waiting for the other hosts (its count is
                            # this host's cards, all finished, or none while waiting for a token)
                            phase=lambda p: "waiting" if p.waiting else None))
