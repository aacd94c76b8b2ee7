"""``hyport attention``: stage 02's numerics comparison from the command line: the case x
backend table against float64, the model-level check, the scan's counts and the port;
``--json OUT`` also writes every row to OUT.
"""

from __future__ import annotations

from hyport_lib.attention import stage
from hyport_lib.attention.show import comparison_table, model_table
from hyport_lib.commands._stage import StageCommand, ProgressWriter
from hyport_lib.proof.port_record import PortProof
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.utils.wording import counted


class _GridBar(ProgressWriter):
    """The comparison grid's bar, closed when the grid is done: the model check and the
    scan that follow are not the grid's time."""

    def __call__(self, update: stage.CaseProgress) -> None:
        if update.step != stage.GRID_STEP:
            return
        super().__call__(update)
        if update.done == update.total:
            self.close()


def _text(result: stage.AttentionStageResult) -> str:
    import pandas as pd

    model, scan = result.model, result.scan
    with pd.option_context("display.width", 250, "display.max_rows", None,
                           "display.max_columns", None, "display.max_colwidth", 90):
        out = [comparison_table(result).drop(columns=["source"]).to_string(index=False), ""]
        out += [f"backend {b.name}: {b.source}" for b in result.backends]
        out += [f"note: {note}" for note in result.notes]
        if model is not None:
            out += ["", model_table(model).to_string(index=False)]
    out += ["", f"scan of {scan.root}: {scan.files_scanned} files, {len(scan.hits)} "
                f"findings {scan.counts()}"]
    if result.port_error:
        out.append(f"port: not made: {result.port_error}")
    elif result.port is not None:
        proof = result.port.proof or PortProof("none (nothing was rewritten)")
        out.append(f"port: {result.port.dst}: {counted(len(result.port.changes), 'change')}, "
                   f"{len(result.port.manual)} left for a human (port.json); proof "
                   f"{proof.verdict}{' (NPU path emulated on CPU)' if proof.emulated else ''}"
                   f"{': ' + proof.error if proof.error else ''}")
    summary = stage.summarize(result)
    return "\n".join(out + ["", f"{summary.verdict}: {summary.summary}"])


def _json(result: stage.AttentionStageResult) -> dict:
    summary, model = stage.summarize(result), result.model
    return {"verdict": summary.verdict, "summary": summary.summary, "rows": result.rows,
            "backends": to_mapping(result.backends), "notes": result.notes,
            "model": model.to_dict() if model else None}


COMMAND = StageCommand(
    "attention", text=_text, json=_json, json_file=True, recording_optional=False,
    bar=lambda: _GridBar("attention grid", "case", total=lambda p: p.total, done=lambda p: p.done))
