"""Rendering of stage 04 for the notebook and the report. The live plot is one display handle
updated with a PNG, as transformers' ``NotebookProgressCallback`` does: an
``ipywidgets.Output``'s plots are lost from static HTML.
"""

from __future__ import annotations

import html
import math
import shlex
import time
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from hyport_lib.display import MISSING, LiveDisplay, figure_png, fit, styled
from hyport_lib.drafting.values import fmt_value
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.params import parameter_fields
from hyport_lib.results import StageRecord
from hyport_lib.train.deepspeed_config import DeepSpeedSettings
from hyport_lib.train.held_answers import HeldAnswers
from hyport_lib.train.loss_vega import overlay_spec
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan
from hyport_lib.train.result import StepMetrics, TrainProgress, TrainResult, finite, loss_span, proof_summary
from hyport_lib.train.stage import STAGE, how_torchrun_ended, summarize
from hyport_lib.triage import show_triage
from hyport_lib.utils.printable import shortened
from hyport_lib.utils.wording import counted
from hyport_lib.workbook.compare import THROUGHPUT_COLUMNS, Part, RunRecord, StageComparison


#: The narrowest step axis of a live plot.
_MIN_AXIS_STEPS = 5
#: Longest text of a held answer shown in a table cell (the record keeps all of it).
CELL_CHARS = 120


def ema(values: list[float], alpha: float = 0.3) -> list[float]:
    """Exponential moving average (non-finite values are carried over, not averaged in)."""
    out, current = [], None
    for value in values:
        if finite(value):
            current = value if current is None else alpha * value + (1 - alpha) * current
        out.append(current if current is not None else float("nan"))
    return out


def spikes(values: list[float], factor: float = 1.5, alpha: float = 0.3) -> list[int]:
    """Indices where a value jumps above ``factor`` × the moving average before it."""
    smooth = ema(values, alpha)
    return [i for i in range(1, len(values))
            if finite(values[i]) and finite(smooth[i - 1]) and smooth[i - 1] > 0
            and values[i] > factor * smooth[i - 1]]


def loss_figure(records: list[StepMetrics], total_steps: Optional[int] = None, title: str = ""):
    """Loss (EMA, spikes, non-finite steps marked), learning rate and tokens/s/p by step."""
    # A bare Figure, not pyplot: nothing is registered with (or switches) the kernel's
    # backend, so the inline plots of the user's own cells keep working in JupyterLab,
    # and a redraw from the polling loop leaves no open figure behind.
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [r.step for r in records]
    loss = [r.loss if finite(r.loss) else float("nan") for r in records]
    fig = Figure(figsize=(12, 3.2))
    ax_loss, ax_lr, ax_tps = fig.subplots(1, 3)
    ax_loss.plot(steps, loss, ".-", color="#1f77b4", label="loss", alpha=0.6)
    ax_loss.plot(steps, ema(loss), "-", color="#d62728", label="EMA (α=0.3)")
    for i in spikes(loss):
        ax_loss.axvline(steps[i], color="#ff7f0e", alpha=0.4, lw=1)
    bad = [r.step for r in records if r.nonfinite_loss or r.nonfinite_grad_norm]
    for step in bad:
        ax_loss.axvline(step, color="black", ls="--", lw=1)
    if bad:
        ax_loss.plot([], [], "k--", label="non-finite loss / grad")
    ax_loss.set_title("loss" + (f" ({title})" if title else ""))
    ax_loss.legend(fontsize=7)
    ax_lr.plot(steps, [r.learning_rate for r in records], "-", color="#2ca02c")
    ax_lr.set_title("learning rate")
    ax_tps.plot(steps, [r.tokens_per_s_per_card for r in records], "-", label="all tokens")
    ax_tps.plot(steps, [r.real_tokens_per_s_per_card for r in records], "-", label="real tokens")
    ax_tps.set_title("tokens/s per card")
    ax_tps.legend(fontsize=7)
    # Whole steps on an axis that grows with the run (at least 5 wide: one step alone would
    # be drawn on 0.96..1.04), or spans the whole run when its length is given.
    right = max(total_steps or _MIN_AXIS_STEPS, max(steps, default=1))
    for ax in (ax_loss, ax_lr, ax_tps):
        ax.set_xlabel("step")
        ax.set_xlim(0.5, right + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def progress_line(progress: TrainProgress) -> str:
    """``[####....] step 7/20  loss 1.2345  12s  (running)``; before the first step, what
    torchrun is doing; stopped, ``(interrupted after step 7: ...)``."""
    if progress.running and progress.waiting_for and not progress.records:
        waited = ", ".join(map(str, progress.waiting_for))
        return f"waiting for node{'s' if len(progress.waiting_for) > 1 else ''} {waited} …  {progress.elapsed_s:.0f}s"
    if progress.running and not progress.records:
        where = f" ({progress.device})" if progress.device else ""
        ranks = counted(progress.ranks, "rank") if progress.ranks else "? ranks"
        return (f"starting torchrun: {ranks}{where}, loading the model and "
                f"the data …  {progress.elapsed_s:.0f}s")
    total = progress.total_steps or "?"
    last = progress.records[-1] if progress.records else StepMetrics()
    loss = last.loss
    shown = f"{loss:.4f}" if finite(loss) else ("nan" if last.nonfinite_loss or loss is not None else MISSING)
    bar = ""
    if progress.total_steps:
        done = int(20 * progress.done_steps / progress.total_steps)
        bar = "[" + "#" * done + "." * (20 - done) + "] "
    state = "running" if progress.running else "finished"
    if progress.stopped:
        state = (f"interrupted after step {progress.done_steps}: metrics and complete checkpoints kept"
                 if progress.records else "interrupted before the first step")
    return (f"{bar}step {progress.done_steps}/{total}  loss {shown}  "
            f"{progress.elapsed_s:.0f}s  ({state})")


class LiveTrainingDisplay:
    """``on_progress`` for :func:`hyport_lib.train.stage.run`: a plot and a progress line
    (the PNG redrawn at most every ``min_interval_s``; the last state always)."""

    def __init__(self, min_interval_s: float = 2.0, title: str = ""):
        self.plot = LiveDisplay(min_interval_s)
        self.line = LiveDisplay(0.0)
        self.title = title
        self._drawn_steps = 0

    def __call__(self, progress: TrainProgress) -> None:
        from IPython.display import Markdown

        self.line.update(Markdown(f"`{progress_line(progress)}`"), force=True)
        steps = len(progress.records)
        if not steps or (steps == self._drawn_steps and progress.running):
            return  # nothing new to draw (the launcher calls twice a second)
        if progress.running and not self.plot.due():
            return  # drawing a PNG costs more than the check: only when it will be shown
        label = progress.provenance.label if progress.provenance else ""
        title = " · ".join(t for t in (self.title, label) if t)
        started = time.monotonic()
        self.plot.update(figure_png(loss_figure(progress.records, None, title)), force=True, started=started)
        self._drawn_steps = steps


def plan_frame(plan: LaunchPlan) -> pd.DataFrame:
    c = plan.params
    rows = [
        ("processes", f"{plan.nproc_per_node} per node × {counted(c.nnodes, 'node')} = {plan.world_size} "
                      f"({plan.device_kind})"),
        ("rendezvous", f"{plan.master_addr}:{plan.master_port}, node rank {c.node_rank}, "
                       f"max restarts {c.max_restarts}"),
        ("model", plan.model_path), ("finetuning", _finetuning(c)),
        ("DeepSpeed", _deepspeed(plan.deepspeed)), ("precision", plan.precision_reason or plan.precision),
        ("attention", plan.attn_implementation),
        ("data", f"{plan.dataset['samples']} samples ({plan.dataset['skipped']} skipped), "
                 f"{'packed' if c.packing else 'padded'} to max_seq_len {c.max_seq_len}"),
        ("steps", f"max_steps {c.max_steps if c.max_steps is not None else '(full epochs)'}, "
                  f"save_steps {c.save_steps}, batch {c.per_device_train_batch_size} × accum "
                  f"{c.gradient_accumulation_steps} × {counted(plan.world_size, 'card')}"),
        ("optimizer", f"lr {c.learning_rate:g} ({c.lr_scheduler_type}, warm-up {c.warmup_steps}), "
                      f"gradient checkpointing {c.gradient_checkpointing}"),
        ("resume", plan.resume_checkpoint or f"from scratch (resume_from={c.resume_from!r})"),
        ("output_dir", plan.output_dir),
    ]
    if plan.memory is not None:
        rows += [("memory per card", plan.memory.card_line)] if plan.memory.card_line else []
        rows.append(("host memory", plan.memory.host_line))
    rows += [("note", note) for note in plan.notes]
    return pd.DataFrame(rows, columns=["setting", "value"])


def memory_frame(memory: Optional[MemoryPlan]) -> pd.DataFrame:
    """One rank's memory item by item (card, then host), as the plan estimated it before
    anything loaded: what, how much, and how the figure was made."""
    rows = [] if memory is None else sorted(memory.rows, key=lambda r: r.where != "card")
    return pd.DataFrame([(r.where, r.what, r.gib, r.how) for r in rows], columns=["where", "what", "GiB", "how"])


def show_memory(plan: LaunchPlan) -> None:
    """The plan's memory lines and the table of its items."""
    from IPython.display import Markdown, display

    memory = plan.memory
    if memory is None:
        display(Markdown("No memory plan was recorded."))
        return
    said = "\n".join(f"- {line}" for line in memory.lines())
    display(Markdown(f"{memory.model} ({memory.parameters:,} parameters; sizes from "
                     f"{memory.shape_source}), one rank's estimate:\n\n{said}"))
    display(fit(memory_frame(memory)))


def _finetuning(c) -> str:
    if c.finetuning_type == "lora":
        return f"LoRA r={c.lora_rank} α={c.lora_alpha} on {c.lora_target}"
    return "full"


def _deepspeed(d: DeepSpeedSettings) -> str:
    parts = [f"ZeRO-{d.zero_stage}", d.optimizer or ""]
    if d.offload_optimizer:
        parts.append(f"optimizer offload to {d.offload_optimizer}")
    if d.torch_adam:
        parts.append("torch Adam")
    if d.fp16:
        parts.append(f"fp16 loss scale {d.loss_scale or 'dynamic'}")
    return ", ".join(p for p in parts if p)


def _train_loss(result: TrainResult) -> str:
    s = result.summary
    if s.mean_loss is None:
        return MISSING
    text = f"{s.mean_loss:.4f} (mean of the {s.finite_losses} finite step losses logged)"
    if result.trainer_loss_differs:
        text += (f"; the Trainer reports {float(result.trainer_loss):.4f}, over the steps of its own "
                 f"process only and with non-finite losses as 0")
    return text


def _exit_code(result: TrainResult):
    """torchrun's exit code, or in words why there is none (as the summary says it)."""
    return result.exit_code if result.exit_code is not None else how_torchrun_ended(result)


def summary_frame(result: TrainResult) -> pd.DataFrame:
    """The seed's results table: exit code, total time, train_loss, step time, ..."""
    s, judged = result.summary, summarize(result)
    if result.plan is not None and result.plan.params.node_rank > 0:  # the job's figures are node 0's
        rows = [("verdict", judged.verdict), ("why", judged.why), ("exit code", _exit_code(result)),
                ("total time", f"{result.wall_s:.2f} s"), ("host", result.host or MISSING),
                ("log", result.plan.log_path)]
        return pd.DataFrame(rows, columns=["item", "value"])
    rows = [
        ("verdict", judged.verdict), ("why", judged.why), ("exit code", _exit_code(result)),
        ("total time", f"{result.wall_s:.2f} s (launch to exit, torchrun start-up included)"),
        ("train_loss", _train_loss(result)),
        ("loss first → last", loss_span(s) or MISSING),
        ("steps logged", f"{s.steps} ({s.first_step}..{s.last_step}); repeated {s.repeated_steps or 'none'}, "
                         f"missing {s.missing_steps or 'none'}"),
        ("mean step time", (f"{s.mean_step_s:.3f} s over {counted(s.measured_steps, 'step')}"
                            + (f"; {s.checkpoint_s:.2f} s of checkpoint saves left out" if s.checkpoint_s else ""))
         if s.mean_step_s else MISSING),
        ("tokens/s/p", _rate(s.tokens_per_s_per_card)), ("real tokens/s/p", _rate(s.real_tokens_per_s_per_card)),
        ("throughput definition", s.throughput_definition),
        ("non-finite loss steps", s.nonfinite_loss_steps or "none"),
        ("non-finite grad-norm steps", s.nonfinite_grad_norm_steps or "none"),
        ("skipped (overflow) steps", s.skipped_steps),
        ("peak memory", f"{s.peak_memory_mb:.0f} MB ({s.memory_source})" if s.peak_memory_mb else MISSING),
        ("restarts", s.restarts), ("last checkpoint", result.last_checkpoint or "none"),
        ("final weights", result.final_dir or "none"),
        ("where", result.provenance.label if result.provenance else ""),
    ]
    if result.reason:
        rows.insert(2, ("reason", result.reason))
    return pd.DataFrame(rows, columns=["item", "value"])


def nodes_frame(result: TrainResult) -> pd.DataFrame:
    """A multi-node job's table (node 0's record): one row per node, its host, ranks, exit, log
    and how its versions differ from node 0's; empty for one node."""
    rows = [(row.node_rank, row.host, ", ".join(map(str, row.ranks)) or MISSING, row.status,
             MISSING if row.exit_code is None else row.exit_code,
             "; ".join(row.versions_differ) or ("node 0's" if row.node_rank else _versions(row.versions)),
             row.log_path or MISSING) for row in result.nodes]
    return pd.DataFrame(rows, columns=["node", "host", "ranks", "status", "exit", "versions", "log"])


def _versions(versions: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in versions.items() if v and not k.startswith("HCCL_")) or MISSING


def _rate(value) -> str:
    return f"{value:,.1f}" if value and not math.isnan(value) else MISSING


def show_plan(plan: LaunchPlan) -> None:
    from IPython.display import display

    display(fit(plan_frame(plan)))


def show_summary(result: TrainResult) -> None:
    from IPython.display import Markdown, display

    frame = summary_frame(result)
    display(fit(styled(frame, colour=("value",))))
    if result.nodes:
        display(fit(nodes_frame(result)))
    for note in result.node_notes:
        display(Markdown(f"Note: {note}"))
    held = result.held_answers
    if held is not None and held.why_not:
        display(Markdown(f"Answers before and after training: {held.why_not}."))
    elif held is not None and held.after:
        display(fit(answers_frame(held)))
    if result.diagnosis:
        show_triage(result.diagnosis)
    if result.status == "interrupted":
        # torchrun's own traceback from the stop signal says nothing the reason does not
        display(Markdown(f"Stopped as asked; the launch log: `{result.plan.log_path}`"))
    elif result.status != "ok" and result.log_tail:
        display(Markdown("Last lines of the launch log:\n\n```\n" + result.log_tail + "\n```"))


def answer_cells(held: Optional[HeldAnswers]) -> list[tuple[str, str, str, str]]:
    """One row per held prompt: the prompt, the data's answer, before and after (cut)."""
    if held is None:
        return []
    columns = [held.prompts, held.taught, held.before, held.after]
    return [tuple(shortened(values[i], CELL_CHARS) if i < len(values) else "" for values in columns)
            for i in range(len(columns[0]))]


def answers_frame(held: Optional[HeldAnswers]) -> pd.DataFrame:
    return pd.DataFrame(answer_cells(held), columns=["prompt", "taught", "before", "after"])


def answers_glance(held: Optional[HeldAnswers]) -> list[tuple[str, str]]:
    """The index card's rows: the first prompt and its answers, or why there are none."""
    if held is None:
        return []
    if held.why_not:
        return [("answers", held.why_not)]
    if not held.after:
        return []
    rows = [("asked", shortened(held.prompts[0], CELL_CHARS))] if held.prompts else []
    if held.before:
        rows.append(("answer before", shortened(held.before[0], CELL_CHARS)))
    return rows + [("answer after", shortened(held.after[0], CELL_CHARS))]


def outputs_frame(result: TrainResult) -> pd.DataFrame:
    """Checkpoints (complete or not) and the final folder's files with their sizes."""
    rows = [{"what": f"checkpoint-{c.step}", "path": str(c.path),
             "detail": "complete" if c.complete else f"INCOMPLETE: {c.why_incomplete}"}
            for c in result.checkpoints]
    final = result.final_dir
    if final:
        for path in sorted(Path(final).iterdir()):
            if path.is_file() and not path.name.startswith("."):
                rows.append({"what": "final", "path": str(path), "detail": f"{path.stat().st_size:,} bytes"})
    else:
        rows.append({"what": "final", "path": "", "detail": "no final weights"})
    return pd.DataFrame(rows, columns=["what", "path", "detail"])


def show_outputs(result: TrainResult) -> None:
    from IPython.display import display

    display(fit(outputs_frame(result)))


# --------------------------------------------------------------------------- the report
def glance(record: StageRecord[TrainResult]) -> list[tuple[str, str]]:
    """The index card (and what the logs of a failed run say)."""
    keys = ("exit code", "steps", "loss first → last", "tokens/s/p", "total s")
    rows = [(key, fmt_value(record.figure(key))) for key in keys]
    plan = record.data.plan
    if plan is not None:  # which precision and why: bf16 only where the device computes it natively
        rows.append(("precision", plan.precision_reason or plan.precision))
    if plan is not None and plan.memory is not None:  # the card's figure; on CPU the host's
        rows.append(("memory", plan.memory.card_line or plan.memory.host_line))
    if record.figure("attention proof"):
        rows.append(("attention", f"{fmt_value(record.figure('attention'))}; proof "
                                  f"{record.figure('attention proof')}"))
    rows += answers_glance(record.data.held_answers)
    if record.data.diagnosis is not None:
        rows.append(("diagnosis", record.data.diagnosis.summary_line()))
    return rows


def glance_svg(record: StageRecord[TrainResult], width: int = 220, height: int = 60) -> str:
    """The card's small inline SVG of the loss by step (empty with fewer than two finite
    losses): no script, no image file, nothing fetched."""
    points = [(m.step, m.loss) for m in record.data.metrics if finite(m.loss)]
    if len(points) < 2:
        return ""
    steps, losses = [p[0] for p in points], [p[1] for p in points]
    lo, hi = min(losses), max(losses)
    span, s0, s1 = (hi - lo) or 1.0, min(steps), max(steps)

    def xy(step, loss):
        x = 4 + (width - 8) * (step - s0) / ((s1 - s0) or 1)
        y = 4 + (height - 8) * (1 - (loss - lo) / span)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(s, v) for s, v in points)
    label = html.escape(f"loss {losses[0]:.4g} → {losses[-1]:.4g} over steps {s0}–{s1}")
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{label}"><title>{label}</title>'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line}"/></svg>')


def blog_facts(record: StageRecord[TrainResult]) -> dict:
    """The model folder the training loaded, its processes on each node (one a card) and its
    nodes (hosts)."""
    plan = record.data.plan
    return ({"model_folder": plan.model_path, "cards": plan.nproc_per_node, "hosts": plan.params.nnodes}
            if plan is not None else {})


def blog_notes(record: StageRecord[TrainResult]) -> list[str]:
    """The plan's notes and how tokens/s were counted."""
    result = record.data
    definition = result.summary.throughput_definition
    planned = result.plan.notes if result.plan is not None else []
    return [n for n in planned if n] + ([definition] if definition else [])


def blog_figures(record: StageRecord[TrainResult]) -> dict[str, Callable]:
    """``loss``: :func:`loss_figure` of the logged steps (None when no step was logged)."""
    return {"loss": lambda: _recorded_loss_figure(record)}


def _recorded_loss_figure(record: StageRecord[TrainResult]):
    if not record.data.metrics:
        return None
    plan = record.data.plan
    return loss_figure(record.data.metrics, plan.params.max_steps if plan is not None else None,
                       title=record.provenance.label if record.provenance else "")


def blog_values(record: StageRecord[TrainResult]) -> dict:
    """What the draft's sections (``blog.md.j2``) derive from the record."""
    result = record.data
    summary, plan = result.summary, result.plan
    at, end = summary.last_loss_step, summary.last_step
    return {"proof": proof_summary(plan.attention_proof if plan is not None else None),
            "trainer_loss_differs": result.trainer_loss_differs,
            "loss_last_finite": summary.last_loss is not None and None not in (at, end) and at != end,
            "answers": answer_cells(result.held_answers),
            "command": train_command(plan.params.to_dict() if plan is not None else {})}


def train_command(params: dict) -> str:
    """``hyport train`` with every recorded parameter that differs from its declared
    default (an empty ``output_dir`` means a new folder, the flag's own default)."""
    fields = {f.name: f for f in parameter_fields(Params)}
    words = ["hyport", "train"]
    for key, value in params.items():
        known = fields.get(key)
        if known is None or value == "":
            continue  # not a flag of the command; "" is the flag's own default
        default = known.default
        if default == value and isinstance(default, bool) == isinstance(value, bool):
            continue
        words += [known.flag, "none" if value is None else _flag_text(value)]
    return " ".join(shlex.quote(w) for w in words) if params else ""


def _flag_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- compare
def compare(runs: list[RunRecord]) -> StageComparison:
    """The losses of every run overlaid (finite losses only; each run named with where its
    figures came from) and the tokens/s per card side by side."""
    losses = pd.DataFrame([{"run": r.run.id, "label": r.label, "step": m.step, "loss": m.loss}
                           for r in runs for m in r.record.data.metrics if finite(m.loss)],
                          columns=["run", "label", "step", "loss"])
    throughput = pd.DataFrame([{"run": r.run.id, "label": r.label, "stage": STAGE, "measure": measure,
                                "tokens_per_s": value if finite(value) else None}
                               for r in runs for measure, value in (
                                   ("tokens/s per card", r.record.data.summary.tokens_per_s_per_card),
                                   ("real tokens/s per card (no padding)",
                                    r.record.data.summary.real_tokens_per_s_per_card))],
                              columns=THROUGHPUT_COLUMNS)
    return StageComparison([Part("losses", "04 train: loss per step overlaid", losses, lambda: overlaid_losses(losses),
                                 lambda: overlay_spec(losses, _overlay_title(losses)))], throughput)


def _overlay_title(losses: pd.DataFrame) -> str:
    measured = losses["label"].unique()
    not_npu = [label for label in measured if "not an NPU measurement" in label]
    note = f" ({len(not_npu)} of {len(measured)} not NPU measurements)" if not_npu else ""
    return f"04_train loss per step, {len(measured)} runs overlaid{note}"


def overlaid_losses(losses: pd.DataFrame):
    """The loss per step of every run, overlaid; None when no run logged one. The legend
    names each run with its provenance (a CPU or emulated run says so)."""
    if losses.empty:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    ax = fig.subplots()
    for label, points in losses.groupby("label", sort=False):
        ax.plot(points["step"], points["loss"], ".-", label=label, alpha=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(_overlay_title(losses))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
