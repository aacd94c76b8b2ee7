"""The inference grid in notebooks, its record in the report (the draft section is
``blog.md.j2`` beside this module) and the comparison of runs. A widget (the card picker)
always has a static twin (:func:`show_log_tails`): the report's HTML strips widgets.
"""

from __future__ import annotations

import html
from typing import Any, Callable, NamedTuple, Optional

import pandas as pd

from hyport_lib.display import MISSING, LiveDisplay, fit, styled, verdict_label
from hyport_lib.devices.card_plan import GridPlan
from hyport_lib.drafting.values import fmt_value
from hyport_lib.inference.agreement import host_agreement
from hyport_lib.inference.grid import COLUMNS, GridProgress, GridResult, consistency, figure, given, ok_median
from hyport_lib.inference.stage import STAGE, summarize
from hyport_lib.models.tiny import random_weights_reason
from hyport_lib.processes import read_log_tail
from hyport_lib.results import StageRecord
from hyport_lib.triage import show_triage
from hyport_lib.utils.printable import shortened
from hyport_lib.workbook.compare import THROUGHPUT_COLUMNS, Part, RunRecord, StageComparison, presence

#: The table shown in notebooks: the frame's columns but these, ``same_output`` after the hash.
DISPLAY_COLUMNS = [c for c in COLUMNS if c not in ("new_tokens", "memory_source", "wall_s", "log_path",
                                                   "not_applicable")]
DISPLAY_COLUMNS.insert(DISPLAY_COLUMNS.index("output_hash") + 1, "same_output")


def compact_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Short hashes, joined previews, first error lines, and ``same_output`` (does this card
    agree with the majority of ok cards, of every host where the grid has several); the
    ``host`` and ``node`` columns only where the rows name them."""
    out = frame.copy()
    hosts = "host" in frame and any(given(h) for h in frame["host"])
    if hosts:
        differing = set(host_agreement(frame).differing)
        keys = [(int(n), int(c)) for n, c in zip(frame["node"], frame["card"])]
    else:
        differing, keys = set(consistency(frame)[1]), [int(c) for c in frame["card"]]
    out["same_output"] = [("yes" if key not in differing else "NO") if status == "ok" else ""
                          for key, status in zip(keys, frame["status"])]
    out["batch_outputs"] = [" | ".join(v) if isinstance(v, list) else "" for v in out["batch_outputs"]]
    out["output_hash"] = [str(h)[:12] if given(h) else "" for h in out["output_hash"]]
    out["error"] = [str(e).splitlines()[0] if given(e) and e else "" for e in out["error"]]
    for col in ("single_output", "fallback_ops", "diagnosis"):
        out[col] = [v if given(v) else "" for v in out[col]]
    shown = [c for c in DISPLAY_COLUMNS if c in out.columns and (hosts or c not in ("host", "node"))]
    return out[shown]


def grid_styler(frame: pd.DataFrame):
    """Status cells coloured, disagreeing cards marked."""
    compact = compact_frame(frame)
    styler = styled(compact, colour=("status",))
    styler = styler.map(lambda v: "background-color: #ffcdd2" if v == "NO" else "",
                        subset=["same_output"])
    return styler.format(precision=3, na_rep=MISSING)


def show_plan(plan: GridPlan) -> None:
    """The preflight: which cards run, which are skipped and who holds them."""
    from IPython.display import Markdown, display

    display(fit(styled(plan.frame(), colour=("status",))))
    if plan.preflight_error:
        display(Markdown(f"{verdict_label('WARN')} {plan.preflight_error}: the cards were not "
                         "checked for other processes."))


def show_summary(result: GridResult) -> None:
    from IPython.display import Markdown, display

    counts = ", ".join(f"{n} {s}" for s, n in result.counts.items() if n)
    verdict = summarize(result).verdict
    lines = [f"{verdict_label(verdict)} {summarize(result).summary}",
             f"Cards: {counts}. Wall time {result.wall_s:.1f} s (timeout {result.timeout_s:g} s per card). "
             f"Logs: `{result.log_dir}`. Figures: {result.provenance.label}."]
    if result.plan and result.plan.preflight_error:
        lines.append(f"{verdict_label('WARN')} Preflight: {result.plan.preflight_error}; "
                     "cards were not checked for other processes.")
    display(Markdown("\n\n".join(lines)))
    if result.merged:
        display(fit(styled(hosts_frame(result), colour=())))
    for card, diagnosis in result.diagnoses.items():
        display(Markdown(f"**Card {card}: what its logs say**"))
        show_triage(diagnosis)


def hosts_frame(result: GridResult) -> pd.DataFrame:
    """A merged grid's nodes: each one's host, cards, and why it counts against the job."""
    return pd.DataFrame([{"node": e.node_rank, "host": e.host or MISSING, "reported": e.reported,
                          "cards": e.cards, "ok": e.ok, "wall_s": e.wall_s, "note": e.note, "table": e.table}
                         for e in result.nodes])


def show_outputs(result: GridResult) -> None:
    """The full texts of the first finished card (agreeing cards said the same)."""
    from IPython.display import Markdown, display

    if not result.outputs:
        display(Markdown("No card finished, so there is no output to show."))
        return
    card, out = next(iter(result.outputs.items()))
    prompts = result.config.batch_prompts
    prompt = html.escape(str(result.config.single_prompt))
    why = random_weights_reason(result.config.model_path)
    lines = ([f"*{why}: the texts below only show that every card gives the same answer.*"] if why else [])
    lines += [f"**Card {card}**, single prompt *{prompt}*:", f"```text\n{out.single or ''}\n```"]
    for i, text in enumerate(out.batch or []):
        prompt = prompts[i][0] if i < len(prompts) else f"sample {i + 1}"
        lines += [f"Batch sample {i + 1}, *{html.escape(str(prompt))}*:", f"```text\n{text}\n```"]
    display(Markdown("\n\n".join(lines)))


def log_tails_html(result: GridResult, lines: int = 20) -> str:
    """Static HTML: the report keeps it."""
    parts = []
    frame = result.frame
    for host, node, card, status in zip(frame["host"], frame["node"], frame["card"], frame["status"]):
        on_host = given(host) and given(node)
        tail = result.log_tail(int(card), lines, node=int(node) if on_host else None)
        where = f"{html.escape(str(host))} (node {int(node)}) " if on_host else ""
        parts.append(f"<h4>{where}card {int(card)} — {html.escape(str(status))}</h4>"
                     f"<pre style='max-height:20em;overflow:auto'>{html.escape(tail or '(empty log)')}</pre>")
    return "\n".join(parts)


def show_log_tails(result: GridResult, lines: int = 20) -> None:
    from IPython.display import HTML, display

    display(HTML(log_tails_html(result, lines)))


def card_log_picker(result: GridResult, lines: int = 40):
    """A Dropdown of cards above the chosen card's log tail."""
    import ipywidgets as widgets

    frame = result.frame
    options = [(f"{f'{h} (node {int(n)}) ' if given(n) else ''}card {int(c)} ({s})",
                (int(n), int(c)) if given(n) else int(c))  # a card number on one host
               for h, n, c, s in zip(frame["host"], frame["node"], frame["card"], frame["status"])]
    picker = widgets.Dropdown(options=options, description="Card")
    out = widgets.Output()

    def render(choice) -> None:
        node, card = choice if isinstance(choice, tuple) else (None, choice)
        # Set the outputs directly: works in a kernel and without one (tests).
        out.outputs = ()
        out.append_stdout((result.log_tail(card, lines, node=node) or "(empty log)") + "\n")

    picker.observe(lambda change: render(change["new"]), names="value")
    if options:
        render(options[0][1])
    return widgets.VBox([picker, out])


#: Lines of each card's log the live view shows while the grid runs.
LIVE_LOG_LINES = 12


def live_grid_display(log_interval_s: float = 2.0) -> Callable[[GridProgress], None]:
    """``on_progress`` for the notebook: how long each running card has run (every second),
    over the table redrawn as each card finishes (no rate limit: it could hide cards that
    finished just before a long wait), over every card's log tail (every ``log_interval_s``),
    a running card's open: a hung card shows its log at once, not after ``infer_timeout_s``."""
    from IPython.display import HTML, Markdown

    line, table = LiveDisplay(min_interval_s=0.0), LiveDisplay(min_interval_s=0.0)
    logs = LiveDisplay(min_interval_s=log_interval_s)
    drawn = []  # the table is drawn first, then again only when a card's row changed

    def update(progress: GridProgress) -> None:
        line.update(Markdown(f"`{grid_progress_line(progress)}`"), force=True)
        changed = not drawn or progress.card is not None or not progress.running
        if changed:
            table.update(fit(grid_styler(progress.frame)), force=True)
            drawn.append(progress.done)
        if changed or logs.due():
            logs.update(HTML(live_log_tails(progress)), force=True)

    return update


def live_log_tails(progress: GridProgress, lines: int = LIVE_LOG_LINES) -> str:
    """Each launched card's log tail as a fold (HTML, no script: it works while the kernel
    is busy with the grid), open while the card runs."""
    parts = []
    for row in progress.frame.itertuples():
        if row.status in ("skipped-busy", "not-started") or not given(row.log_path) or not row.log_path:
            continue
        card, status = row.card, row.status
        seconds = progress.elapsed_s.get(card)
        state = f"running {seconds:.0f} s" if seconds is not None else str(status)
        tail = read_log_tail(row.log_path, lines) or "(nothing logged yet)"
        parts.append(f"<details class='hyport-card-log'{' open' if status == 'running' else ''}>"
                     f"<summary>card {html.escape(str(card))}: {html.escape(state)} "
                     f"<code>{html.escape(str(row.log_path))}</code></summary>"
                     f"<pre style='max-height:14em;overflow:auto'>{html.escape(tail)}</pre></details>")
    return "".join(parts)


def grid_progress_line(progress: GridProgress) -> str:
    text = f"{progress.done}/{progress.total} cards finished"
    if progress.stopped:  # the cards stopped running, and those never started, counted apart
        statuses = list(progress.frame["status"])
        text += "".join(f", {statuses.count(status)} {said}" for status, said in
                        (("interrupted", "stopped"), ("not-started", "not started")) if statuses.count(status))
    if progress.elapsed_s:
        text += "; running: " + ", ".join(f"card {card} ({seconds:.0f} s)"
                                          for card, seconds in sorted(progress.elapsed_s.items()))
    if progress.waiting:
        text += f"; waiting for {progress.waiting}"
    if progress.stopped:
        return text + " (interrupted: the cards that finished are kept)"
    return text + ("" if progress.running else " (finished)")


# --------------------------------------------------------------------------- the report
#: Longest answer an index card shows (the stage page holds all of it).
GLANCE_ANSWER_CHARS = 90


def glance(record: StageRecord[GridResult]) -> list[tuple[str, str]]:
    grid, consistent = record.data, record.figure("consistent")
    rows = [("hosts × cards", grid.hosts_cards)] if grid.merged else \
        [("node", f"{grid.node_rank} of {grid.nnodes}: its own cards (the job's record is node 0's)")] \
        if grid.nnodes > 1 else []
    rows += [("cards ok", fmt_value(record.figure("cards ok"))),
            ("consistent", fmt_value(consistent) if consistent is not None else "—"),
            ("warm tokens/s (median)", fmt_value(record.figure("tokens/s incl. prefill (median)"))),
            ("cold first call s (median)", fmt_value(record.figure("cold first call s (median)")))]
    if grid.config.attn_implementation:
        rows.append(("attention", grid.config.attn_implementation))
    if grid.memory is not None:
        # the card's line where there are cards; on CPU the host holds everything
        rows.append(("memory", grid.memory.card_line or grid.memory.host_line))
    sample = grid.sample_answer()
    if sample is not None:
        card, text = sample
        why = random_weights_reason(grid.config.model_path)
        rows.append((f"{card if grid.merged else f'card {card}'} answered", "random weights: only shows the cards agree" if why
                     else shortened(text, GLANCE_ANSWER_CHARS)))
    if grid.diagnoses:
        card, first = next(iter(grid.diagnoses.items()))
        rows.append((f"card {card} diagnosis", first.summary_line()))
    return rows


def blog_facts(record: StageRecord[GridResult]) -> dict:
    """The model folder the workers loaded (``tiny`` resolves to a built folder); the cards
    of this host, or where several hosts ran, the job's hosts and the cards of each one
    that reported (``host_cards``), ``cards`` only where every one ran as many."""
    grid = record.data
    if grid.merged:
        host_cards = [entry.cards for entry in grid.nodes if entry.reported]
        return {"model_folder": grid.config.model_path, "hosts": len(grid.nodes), "host_cards": host_cards or None,
                "cards": host_cards[0] if len(set(host_cards)) == 1 else None}
    cards = [c for c in grid.plan.cards if c.run] if grid.plan else []
    return {"model_folder": grid.config.model_path, "cards": len(cards) or None}


def blog_values(record: StageRecord[GridResult]) -> dict:
    """``warm``: warm-up calls made and the cold one recorded apart (older records and
    ``warmup_runs=0`` timed the first call)."""
    grid = record.data
    # several hosts: their count, those that reported, and each one's cards (where every
    # host ran as many), else the cards of all
    cards = [entry.cards for entry in grid.nodes if entry.reported]
    return {"warm": grid.config.warmup_runs > 0 and bool(grid.frame["cold_s"].notna().any()),
            "hosts": len(grid.nodes) if grid.merged else None,
            "reported_hosts": len(cards) if grid.merged and len(cards) < len(grid.nodes) else None,
            "cards_per_host": cards[0] if len(set(cards)) == 1 else None,
            "all_cards": sum(cards) if cards else None,
            "missing": [entry for entry in grid.nodes if entry.note],
            **_sample(grid),
            "random_why": random_weights_reason(grid.config.model_path)}


def _sample(grid: GridResult) -> dict:
    """The answer the draft quotes: ``(card, text)``, and where several hosts ran, its host."""
    sample = grid.sample_answer()
    if sample is None or not grid.merged:
        return {"sample": sample, "sample_host": None}
    key, text = sample  # "node 1 card 0", as the merge keys the outputs
    node, card = (int(word) for word in str(key).split()[1::2])
    host = next((entry.host for entry in grid.nodes if entry.node_rank == node), "")
    return {"sample": (card, text), "sample_host": f"{host} (node {node})"}


# --------------------------------------------------------------------------- compare
def compare(runs: list[RunRecord]) -> StageComparison:
    """Each card per run, and whether the cards answered the same across runs; beside the other
    stages' throughput, the median of the finished cards' tokens/s."""
    per_run = {r.run.id: _cards(r.record.data.frame) for r in runs}
    ids = list(per_run)
    columns = ["card", *[f"{i} {what}" for i in ids for what in ("status", "agrees", "tokens/s")], "same output"]
    rows = []
    for card in sorted({c for cards in per_run.values() for c in cards}, key=lambda c: (isinstance(c, str), str(c))):
        row = {"card": card}
        for i in ids:
            seen = per_run[i].get(card, _Card(MISSING, None, None, None))
            row.update({f"{i} status": seen.status, f"{i} agrees": seen.agrees, f"{i} tokens/s": seen.tokens_per_s})
        # Across runs when every run has the card; a card only some have is said (one run of
        # the stage: nothing to compare, None).
        hashes = [per_run[i][card].hash for i in ids if card in per_run[i]]
        if len(ids) < 2:
            row["same output"] = None
        elif len(hashes) < len(ids):
            row["same output"] = presence([r.run for r in runs if card in per_run[r.run.id]], [r.run for r in runs])
        else:
            row["same output"] = len(set(hashes)) == 1 and None not in hashes
        rows.append(row)
    cards = pd.DataFrame(rows, columns=columns).set_index("card")
    throughput = pd.DataFrame(
        [{"run": r.run.id, "label": r.label, "stage": STAGE, "measure": measure,
          "tokens_per_s": ok_median(r.record.data.frame, column)}
         for r in runs for measure, column in (("tokens/s incl. prefill (median of cards)", "tokens_per_s"),
                                               ("decode tokens/s (median of cards)", "decode_tokens_per_s"))],
        columns=THROUGHPUT_COLUMNS)
    parts = [Part("cards", "03 inference: cards side by side (agrees: with its run's reference answer)", cards)]
    return StageComparison(parts if rows else [], throughput)


class _Card(NamedTuple):
    status: Any
    agrees: Optional[bool]  # with its run's reference answer (None: not a finished card)
    tokens_per_s: Optional[float]
    hash: Optional[str]


def _cards(frame: pd.DataFrame) -> dict[Any, _Card]:
    """One run's cards, as the grid itself judges agreement (the most common hash); a
    merged grid's by node (``node 1 card 0``), judged across its hosts."""
    frame = frame[frame["card"].notna()]
    if any(given(n) for n in frame["node"]):
        agreement = host_agreement(frame)
        reference, differing = agreement.reference, set(agreement.differing)
        keys = [(int(n), int(c)) for n, c in zip(frame["node"], frame["card"])]
        names = [f"node {n} card {c}" for n, c in keys]
    else:
        _, cards, reference = consistency(frame)
        differing, keys = set(cards), [int(c) for c in frame["card"]]
        names = keys
    return {name: _Card(row.status, key not in differing if row.status == "ok" and reference else None,
                        figure(row.tokens_per_s), row.output_hash if given(row.output_hash) else None)
            for name, key, row in zip(names, keys, frame.itertuples())}
