"""Rendering of stage 05: tables (also printed by ``hyport verify``), the notebook's displays
and the report's hooks on the record."""

from __future__ import annotations

import shlex
from typing import Optional

import pandas as pd

from hyport_lib.checkpoint_files.findings import findings_frame
from hyport_lib.display import MISSING, LiveDisplay, explorable_table, figure_png, fit, styled, verdict_colour
from hyport_lib.drafting.values import fmt_value
from hyport_lib.results import StageRecord
from hyport_lib.weights.checksums import checksum_name
from hyport_lib.weights.compare import DIFF_COLUMNS, Comparison
from hyport_lib.weights.defaults import Sources, checked_label
from hyport_lib.weights.result import WeightsResult
from hyport_lib.weights.stage import summarize
from hyport_lib.weights.scan import ScanProgress
from hyport_lib.utils.wording import counted, plural

#: Severity -> the verdict whose colour it takes in tables.
_SEVERITY_AS = {"error": "FAIL", "warning": "WARN", "info": "SKIP"}


def progress_line(p: ScanProgress) -> str:
    if not p.total_bytes and not p.tensors_total:  # a step with nothing to count (a process)
        return f"{p.phase} …"
    rate = p.done_bytes / p.elapsed_s / 1e6 if p.elapsed_s > 0 else 0.0
    return (f"{p.phase}: {p.fraction:6.1%}  {p.done_bytes / 1e6:,.1f} / {p.total_bytes / 1e6:,.1f} MB, "
            f"{p.tensors_done}/{p.tensors_total} tensors, {rate:,.0f} MB/s  ({p.file})")


class LiveScanDisplay:
    """``on_progress`` for the notebook: one line per phase (the scan, each comparison),
    refreshed at most every ``min_interval_s``; each phase's last state stays."""

    def __init__(self, min_interval_s: float = 0.5):
        self.min_interval_s = min_interval_s
        self.lines: dict[str, LiveDisplay] = {}

    def __call__(self, progress: ScanProgress) -> None:
        from IPython.display import Markdown

        live = self.lines.setdefault(progress.phase, LiveDisplay(self.min_interval_s))
        done = progress.done_bytes >= progress.total_bytes
        live.update(Markdown(f"`{progress_line(progress)}`"), force=done)


def summary_frame(result: WeightsResult) -> pd.DataFrame:
    """The seed's proof, one row per figure."""
    insp = result.inspection
    rows = [("folder", insp.path), ("layout", insp.kind)]
    if insp.index is not None:
        rows += [("shards (index)", len(insp.index.shards)), ("tensors in the index", f"{insp.index.tensors:,}"),
                 ("index total_size", _num(insp.index.total_size))]
    for shard in insp.shards:
        rows.append((f"  {shard.label}", f"{shard.size:,} bytes, {len(shard.tensors)} keys"))
    rows += [("tensors (headers)", f"{len(insp.tensors):,}"), ("tensor bytes", f"{insp.tensor_bytes:,}"),
             ("model type", insp.config.model_type), ("architectures", ", ".join(insp.config.architectures)),
             ("config dtype", insp.config.dtype), ("parameters", f"{insp.parameters:,}"),
             ("parameters without tied duplicates", f"{insp.unique_parameters:,}")]
    if insp.names.class_name:
        rows.append(("model class (meta device)", f"{insp.names.class_name}: {insp.names.parameters:,} parameters"))
    if result.reload is not None:
        rows.append(("reload", result.reload.line))
    judged = summarize(result)
    rows += [("headers, index and config read and checked", f"{insp.seconds * 1000:.1f} ms"),
             ("model class built on the meta device", f"{insp.model_seconds:.2f} s"),
             ("verdict", judged.verdict), ("why", judged.why)]
    return _text_frame(rows)


def _text_frame(rows) -> pd.DataFrame:
    """A what/value table whose values are text: no float formatting of mixed columns."""
    return pd.DataFrame([(k, MISSING if v is None else str(v)) for k, v in rows], columns=["what", "value"])


def _num(value) -> Optional[str]:
    return f"{value:,}" if isinstance(value, int) else value


def shards_frame(result: WeightsResult) -> pd.DataFrame:
    return pd.DataFrame(result.shards, columns=["file", "bytes", "tensors", "dtypes", "parameters", "header bytes", "ok"])


def reload_frame(result: WeightsResult) -> pd.DataFrame:
    r = result.reload
    if r is None:
        return pd.DataFrame(columns=["what", "value"])
    peak = f"{r.peak_rss_bytes / 2**20:,.0f} MiB (RUSAGE_SELF of the child)" if r.peak_rss_bytes else None
    rows = [("status", r.status), ("line", r.line), ("class", r.model_class), ("model type", r.model_type),
            ("parameters", _num(r.parameters)), ("dtype asked / loaded", f"{r.dtype} / {r.loaded_dtype}"),
            ("attn_implementation", r.attn_implementation), ("from_pretrained s", r.load_s),
            ("child wall s", r.wall_s), ("peak memory", peak),
            ("missing / unexpected / mismatched keys",
             f"{len(r.missing_keys)} / {len(r.unexpected_keys)} / {len(r.mismatched_keys)}"),
            ("processor", r.processor or r.processor_error or "no processor files"),
            ("local_files_only", r.local_files_only), ("trust_remote_code", r.trust_remote_code),
            ("log", r.log_path)]
    return _text_frame(rows)


def comparison_frame(comparison: Comparison, limit: Optional[int] = 15) -> pd.DataFrame:
    """The tensors that differ most first (then the others), at most ``limit`` rows."""
    frame = pd.DataFrame(comparison.rows, columns=list(DIFF_COLUMNS))
    order = pd.DataFrame({"same": frame["status"] == "same", "no change": frame["relative change"].isna(),
                          "change": -frame["relative change"].fillna(0.0), "top": -frame["max |Δ|"].fillna(0.0)})
    frame = frame.loc[order.sort_values(list(order.columns), kind="stable").index].reset_index(drop=True)
    return frame.head(limit) if limit else frame


def zero_frame(result: WeightsResult) -> pd.DataFrame:
    z = result.zero
    if z is None or not z.present:
        return pd.DataFrame(columns=["file", "kind", "rank", "bytes"])
    return pd.DataFrame([{**vars(f), "rank": MISSING if f.rank is None else str(f.rank)} for f in z.files],
                        columns=["file", "kind", "rank", "bytes"])


def _comparison_styler(frame: pd.DataFrame):
    return styled(frame).format(precision=4, na_rep=MISSING)


def _severity_styler(frame: pd.DataFrame):
    return styled(frame, colour=("severity",), cell_colour=lambda v: verdict_colour(_SEVERITY_AS.get(v, v)))


def change_figure(comparison: Comparison):
    """Relative change per tensor against the base, sorted (log scale)."""
    # A bare Figure, not pyplot: matplotlib.use("Agg") here switched a user's whole kernel
    # off the inline backend, and pyplot would keep the figure open.
    from matplotlib.figure import Figure

    values = sorted(pd.DataFrame(comparison.rows, columns=list(DIFF_COLUMNS))["relative change"].dropna(),
                    reverse=True)
    fig = Figure(figsize=(8, 2.8))
    ax = fig.subplots()
    shown = [v if v > 0 else float("nan") for v in values]
    ax.bar(range(len(shown)), shown, color="#1f77b4", width=1.0)
    if any(v > 0 for v in values):
        ax.set_yscale("log")
    ax.set_xlabel("tensor (sorted)")
    ax.set_ylabel("‖Δ‖ / ‖base‖")
    unset = comparison.changed - sum(1 for v in values if v > 0)
    note = f" ({unset} from a base of zeros: not shown)" if unset > 0 else ""
    ax.set_title(f"{comparison.changed} of {comparison.compared} tensors changed against the "
                 f"{comparison.role}{note}", fontsize=10)
    fig.tight_layout()
    return fig


def _show(*items) -> None:
    from IPython.display import Markdown, display

    for item in items:
        display(Markdown(item) if isinstance(item, str) else item)


def show_sources(sources: Sources) -> None:
    if sources.skip:  # nothing to check here (a stopped stage 04, a node > 0): why, in one line
        _show(f"**SKIP**: {sources.skip}")
        return
    lines = [f"- **weights**: `{sources.weights}`",
             f"- **checkpoint** (same model expected): `{sources.checkpoint}`" if sources.checkpoint
             else "- **checkpoint**: none",
             f"- **base** (training must have changed it): `{sources.base}`" if sources.base
             else "- **base**: none", f"\nFrom: {sources.note}."]
    _show("\n".join(lines))


def show_summary(result: WeightsResult) -> None:
    if result.skipped:  # nothing was checked (a stopped stage 04, a node > 0): why, in one line
        _show(f"**SKIP**: {result.skipped}")
        return
    _show(f"**{result.seed_line()}**")
    _show(fit(styled(summary_frame(result), colour=("value",))))
    _show(*explorable_table(shards_frame(result), what="shards"))


def show_findings(result: WeightsResult) -> None:
    if result.skipped:  # show_summary said why
        return
    n = result.counts
    _show(f"{counted(n['error'], 'error')}, {counted(n['warning'], 'warning')}, {counted(n['info'], 'note')}.")
    if result.findings:
        _show(*explorable_table(findings_frame(result.findings), _severity_styler, what="findings"))


def show_scan(result: WeightsResult) -> None:
    if result.skipped:  # show_summary said why
        return
    s = result.scan
    if s is None:
        _show("Full scan not run (`full_scan=False`): headers only.")
        return
    rate = f", {s.throughput_gb_s:.2f} GB/s" if s.throughput_gb_s else ""
    _show(f"Read {len(s.tensors)} tensors, {s.bytes_read:,} bytes in {s.seconds:.2f} s{rate}; "
          f"checksums {checksum_name(s.checksum)}; {counted(len(s.nonfinite_tensors), 'tensor')} with NaN/Inf; "
          f"{counted(len(s.skipped), 'tensor')} not readable from their file.")


def show_reload(result: WeightsResult) -> None:
    if result.skipped:  # show_summary said why
        return
    if result.reload is None:
        _show("Reload not run (`reload=False`).")
        return
    _show(fit(styled(reload_frame(result), colour=("value",))))
    if not result.reload.load_ok and result.reload.log_tail:
        _show("Last lines of the reload log:\n\n```\n" + result.reload.log_tail + "\n```")


def show_comparisons(result: WeightsResult) -> None:
    if result.skipped:  # show_summary said why
        return
    if not result.comparisons:
        _show("No base and no checkpoint to compare with.")
    for c in result.comparisons:
        statuses = ", ".join(f"{k} {v}" for k, v in c.to_dict()["statuses"].items())
        _show(f"**Against the {c.role}** `{c.other_path}`: {statuses} "
              f"({c.bytes_read:,} bytes read in {c.seconds:.2f} s).")
        limit = 15 if c.count("same") < len(c.rows) else 5  # all equal: a few rows say it
        # every tensor, sortable and filterable in the lab; the report keeps those that changed most
        _show(*explorable_table(comparison_frame(c, None), _comparison_styler, what="tensors",
                                limit=limit, report_limit=limit))
        if c.role == "base" and c.compared:
            _show(figure_png(change_figure(c)))
    p = result.parity
    if p is not None:
        text = (f"max |Δ logits| {p.max_abs_diff:.3g}, top-1 agreement {p.top1_agreement:.3f}, max KL "
                f"{p.max_kl:.3g} over {p.tokens} tokens (float32, CPU; tokenizer from `{p.tokenizer_path}`)"
                if p.status == "ok" else f"{p.status}: {p.reason}")
        _show(f"**Logits parity** with `{p.other_path}`: {text}.")


def show_zero(result: WeightsResult) -> None:
    if result.skipped:  # show_summary said why
        return
    z = result.zero
    if z is None or not z.present:
        _show("No DeepSpeed ZeRO states to check (no checkpoint, or no `global_stepN/` in it).")
        return
    ranks = counted(z.dp_world_size, "data-parallel rank") if z.dp_world_size else "? data-parallel ranks"
    _show(f"`{z.tag}/` of `{z.checkpoint}`: ZeRO-{z.zero_stage}, written by DeepSpeed "
          f"{z.ds_version} for {ranks} "
          f"({counted(len(z.ranks), 'optimizer-state file')}, precision {z.precision or 'fp32'}); "
          f"{_num(z.parameters)} trainable parameters in `param_shapes`.")
    _show(*explorable_table(zero_frame(result), what="files"))
    zc = result.zero_compare
    if zc is None:
        _show("Consolidation not run (`consolidate_zero=False`).")
        return
    if zc.status != "ok":
        _show(f"**zero_to_fp32 failed**: {zc.reason}\n\n```\n{zc.log_tail}\n```")
        return
    rows = [{"compared with": t["folder"], "role": t["role"], "tensors": t["compared"],
             "identical after cast": t["matching"], "differing": t["differing"],
             "max |fp32→saved − saved|": t["max_abs_cast"], "max |fp32 − saved|": t["max_abs_fp32"],
             "only in ZeRO": len(t["only_in_zero"]), "only in files": len(t["only_in_file"])}
            for t in zc.targets]
    _show("DeepSpeed says: " + "; ".join(zc.deepspeed_says))
    _show(fit(styled(pd.DataFrame(rows)).format(precision=6, na_rep=MISSING)))


# --------------------------------------------------------------------------- the report
def glance(record: StageRecord[WeightsResult]) -> list[tuple[str, str]]:
    if record.data.skipped:
        return [("checked", "nothing"), ("why", record.data.skipped)]
    head = record.headline
    out = [("checked", checked_label(record.data.source))]
    out += [(k, fmt_value(record.figure(k))) for k in ("shards", "tensors", "parameters")]
    errors, warnings = record.figure("errors"), record.figure("warnings")
    out.append(("findings", f"{fmt_value(errors)} {plural('error', errors)}, "
                            f"{fmt_value(warnings)} {plural('warning', warnings)}"))
    out.append(("LOAD_OK", fmt_value(head["LOAD_OK"]) if "LOAD_OK" in head else "not reloaded"))
    if "tensors changed vs base" in head:
        out.append(("vs base", f"{fmt_value(head['tensors changed vs base'])} tensors changed"))
    if "checkpoint tensors identical" in head:
        out.append(("vs checkpoint", f"{fmt_value(head['checkpoint tensors identical'])} tensors identical"))
    return out


#: The comparisons' headline figures the draft shows, by the names its template uses.
_COMPARED = {"base": "tensors changed vs base", "checkpoint": "checkpoint tensors identical",
             "parity": "checkpoint max |Δ logits|", "zero": "ZeRO fp32→saved max |Δ|"}


def blog_values(record: StageRecord[WeightsResult]) -> dict:
    """The folder's files as a listing, the comparisons' headline figures by a short name,
    and the ``hyport verify --reload`` command with what the reload printed."""
    data, head = record.data, record.headline
    files = ([data.index.file] if data.index and data.index.file else []) + \
        [str(f) for f in shards_frame(data)["file"]]
    reload, path = data.reload, data.path
    values = {"files": [f"{path}/"] + [f"  {f}" for f in files] if files else [],
              "compared": {name: head[key] for name, key in _COMPARED.items() if key in head}}
    if reload is None:
        return values
    words = ["hyport", "verify", reload.path or path, "--reload", "--dtype", reload.dtype,
             "--attn-implementation", reload.attn_implementation]
    if reload.trust_remote_code:
        words.append("--trust-remote-code")
    return {**values, "reload_command": " ".join(shlex.quote(w) for w in words), "reload_said": reload.line}
