"""Sections of the first three stages in the seed's shape: the host (its environment
table and checks), the attention swap (the scan's findings as before / after, the
numerics in a sentence and a table, the model-level check) and inference on every card
(the per-card table and a sample answer).

Each renderer reads one stage's recorded ``data`` (see :mod:`hyport_lib.report.blog_data`)
and returns Markdown lines; nothing is measured or recomputed here except the counts
and the worst error-over-bound per attention implementation, which are read off the
recorded rows (see :mod:`hyport_lib.report.blog_format` for the rounding).
"""

from __future__ import annotations

import math

from hyport_lib.report.blog_data import Ctx, StageView, as_list, dig, find
from hyport_lib.report.blog_format import code, fenced, is_number, num, quote, ratio, recorded, table
from hyport_lib.scan.grouping import group_hits
from hyport_lib.utils.versions import pinned_version, unpad_input_values

_VERDICTS = ("PASS", "WARN", "FAIL", "SKIP")


# --------------------------------------------------------------------------- 01
def environment_body(view: StageView, ctx: Ctx) -> list[str]:
    """The seed's environment list as a table, then the checks that applied."""
    t, d, run = ctx.t, view.data, ctx.run
    system = dig(d, "system", default={})
    versions = dig(d, "versions", default={}) or run.versions or {}
    params = run.parameters if isinstance(run.parameters, dict) else {}
    names = t["env_rows"]

    def version(name):
        value = dig(versions, name)
        return ctx.value(value) if value else t["not_installed"]

    rows = [(names["host"], ctx.value(run.host or None)),
            (names["os"], ctx.value(dig(system, "os"))),
            (names["kernel"], ctx.value(dig(system, "kernel")))]
    if "in_container" in system:
        rows.append((names["container"], ctx.yes_no(system.get("in_container"))))
    rows += [(names["cpu"], ctx.value(dig(system, "cpu_model"))),
             (names["cores"], ctx.value(dig(system, "cpu_count"))),
             (names["ram"], ctx.value(dig(system, "ram_total_gb"))),
             (names["python"], version("python")), (names["torch"], version("torch")),
             (names["torch_npu"], version("torch_npu")),
             (names["transformers"], version("transformers")),
             (names["deepspeed"], version("deepspeed")),
             (names["cann"], ctx.value(dig(d, "cann", "version")) if dig(d, "cann", "version")
              else t["not_found"]),
             (names["device"], ctx.value(dig(d, "device"))),
             (names["cards"], ctx.value(dig(d, "num_cards"))),
             (names["model"], ctx.value(params.get("model_path")))]
    resolved = model_folder(ctx)
    if resolved and resolved != params.get("model_path"):
        rows.append((names["model_resolved"], ctx.value(resolved)))
    lines = [t["env_intro"].format(stage=code(view.stage)), ""]
    lines += table([t["item"], t["value"]], rows)
    counts = dig(d, "summary", default={})
    checks = [c for c in as_list(d.get("checks")) if isinstance(c, dict)]
    if checks and isinstance(counts, dict):
        lines += [t["checks_intro"].format(**{v: num(counts.get(v, 0)) for v in _VERDICTS}), ""]
        applied = [c for c in checks if c.get("verdict") != "SKIP"]
        lines += table([t["check"], t["verdict"], t["reason"]],
                       [(code(c.get("name")), c.get("verdict", ""), recorded(c.get("reason"), ctx.lang))
                        for c in applied])
    return lines


def model_folder(ctx: Ctx):
    """The model folder the stages actually loaded (``tiny`` resolves to a built folder)."""
    inference, train = find(ctx.views, "inference"), find(ctx.views, "train")
    return (dig(inference.data if inference else {}, "config", "model_path")
            or dig(train.data if train else {}, "plan", "model_path"))


# --------------------------------------------------------------------------- 02
def attention_body(view: StageView, ctx: Ctx) -> list[str]:
    """What the scan found (before / after), the numerics, the model-level check."""
    return scan_lines(view, ctx) + numerics_lines(view, ctx) + model_lines(view, ctx)


def scan_lines(view: StageView, ctx: Ctx) -> list[str]:
    t, scan = ctx.t, dig(view.data, "scan")
    if not isinstance(scan, dict):
        return [t["att_no_scan"], ""]
    hits = [h for h in as_list(scan.get("hits")) if isinstance(h, dict)]
    where = {"files": num(scan.get("files_scanned")), "path": code(scan.get("path") or scan.get("root"))}
    if not hits:
        lines = [t["att_clean"].format(**where), ""]
    else:
        lines = [t["att_intro"].format(hits=num(len(hits)), **where), ""]
        colon = ": " if ctx.lang == "en" else "："
        # By kind, one line per source line, each suggestion once (the scan's own grouping).
        for group in group_hits(hits):
            kind = t["scan_kinds"].get(group.category, group.category)
            label = "scan_group_guard" if group.category == "is_cuda_guard" else "scan_group"
            lines.append("- " + t[label].format(
                kind=kind, category=code(group.category), count=num(len(group.places)),
                colon=colon, suggestion=code(group.suggestion)))
            for file, line, snippet in group.places:
                lines.append(f"  - {code(f'{file}:{line}')} {code(snippet)}")
        lines.append("")
    pinned = dig(scan, "pinned", default={})
    served = view.data.get("flash_attn_version")
    if isinstance(pinned, dict):
        for name, spec in pinned.items():
            lines += [t["att_pinned"].format(name=code(name), spec=code(spec)), ""]
            version = pinned_version(spec)
            if served and version and unpad_input_values(version) != unpad_input_values(str(served)):
                lines += [t["att_pin_mismatch"].format(served=code(served), pinned=code(version)), ""]
    return lines


def backend_rows(rows: list[dict]) -> list[dict]:
    """Per implementation, in the recorded order: where it ran, its rows per verdict, its
    largest ``max_abs`` and its worst ``max_abs / bound``."""
    out: dict[str, dict] = {}
    for r in rows:
        if not isinstance(r, dict) or not r.get("backend"):
            continue
        entry = out.setdefault(r["backend"], {"name": r["backend"], "source": r.get("source"),
                                              "rows": 0, "max_abs": None, "ratio": None,
                                              **{v: 0 for v in _VERDICTS}})
        entry["rows"] += 1
        if r.get("verdict") in _VERDICTS:
            entry[r["verdict"]] += 1
        value, bound = r.get("max_abs"), r.get("bound")
        if r.get("finite") is False:  # NaN / Inf in the output (its max_abs was recorded as null)
            value = math.inf
        if is_number(value):
            entry["max_abs"] = value if entry["max_abs"] is None else max(entry["max_abs"], value)
            if is_number(bound) and bound:
                share = value / bound
                entry["ratio"] = share if entry["ratio"] is None else max(entry["ratio"], share)
    return list(out.values())


def numerics_lines(view: StageView, ctx: Ctx) -> list[str]:
    t, head = ctx.t, view.headline
    worst = next((v for k, v in head.items() if str(k).startswith("worst ") and is_number(v)), None)
    values = {"cases": num(head.get("cases")), "rows": code(head.get("rows PASS/WARN/FAIL")),
              "prov": ctx.prov(view.provenance)}
    sentence = (t["att_numerics"].format(worst=num(worst), **values) if worst is not None
                else t["att_numerics_no_worst"].format(**values))
    lines = [sentence, ""]
    backends = backend_rows(as_list(view.data.get("rows")))
    if backends:
        skips = any(b["SKIP"] for b in backends)
        header = [t["impl"], t["ran_on"], t["rows"], "PASS", "WARN", "FAIL"] + (["SKIP"] if skips else [])
        header += [t["max_abs"], t["worst_ratio"]]
        body = []
        for b in backends:
            counts = [num(b[v]) for v in ("PASS", "WARN", "FAIL")] + ([num(b["SKIP"])] if skips else [])
            body.append([code(b["name"]), recorded(b["source"], ctx.lang), num(b["rows"]), *counts,
                         num(b["max_abs"]), ratio(b["ratio"]) if b["ratio"] is not None else num(None)])
        lines += table(header, body)
    if "attention" in ctx.figures:
        label = view.provenance.get("label", "")
        lines += [f"![{t['heatmap_alt']}]({ctx.figures['attention']})", "",
                  f"*{t['heatmap_caption'].format(label=code(label))}*", ""]
    return lines


def model_lines(view: StageView, ctx: Ctx) -> list[str]:
    model = dig(view.data, "model")
    if not isinstance(model, dict):
        return []
    t = ctx.t
    lines = [t["att_model"].format(impl=code(model.get("attn_implementation")),
                                   dlogits=num(model.get("max_abs_logits")),
                                   top1=num(model.get("top1_agreement")),
                                   greedy=ctx.yes_no(model.get("greedy_identical")),
                                   calls=num(model.get("swapped_calls"))), ""]
    verdict = " — ".join(str(x) for x in (model.get("verdict"), model.get("detail")) if x)
    if verdict:
        lines += [t["att_model_verdict"], ""] + quote(verdict)
    return lines


# --------------------------------------------------------------------------- 03
def inference_body(view: StageView, ctx: Ctx) -> list[str]:
    """The per-card table (the seed's NPU | result), one answer, where the logs are."""
    t, d = ctx.t, view.data
    counts = dig(d, "counts", default={})
    rows = [r for r in as_list(d.get("rows")) if isinstance(r, dict)]
    # "warm" only where the run made untimed warm-up calls and recorded the cold one apart
    # (runs from before warmup_runs existed, or with warmup_runs=0, timed the first call).
    warmup = dig(d, "config", "warmup_runs")
    warm = is_number(warmup) and warmup > 0 and any(r.get("cold_s") is not None for r in rows)
    intro = t["inf_intro_warm"] if warm else t["inf_intro"]
    lines = [intro.format(ok=num(counts.get("ok")), failed=num(counts.get("failed")),
                          timeout=num(counts.get("timeout")), busy=num(counts.get("skipped-busy"))), ""]
    lines += quote(d.get("consistency"))
    if rows:
        suffix = "_warm" if warm else ""
        cold = [t["cold_s"]] if warm else []
        lines += table([t["card"], t["card_status"], t["load_s"], *cold, t["first_token_s" + suffix],
                        t["tps" + suffix], t["decode_tps" + suffix], t["memory"], t["error"]],
                       [(num(r.get("card")), recorded(r.get("status"), ctx.lang), num(r.get("load_s")),
                         *([num(r.get("cold_s"))] if warm else []), num(r.get("first_token_s")),
                         num(r.get("tokens_per_s")), num(r.get("decode_tokens_per_s")),
                         num(r.get("peak_memory_mb")), recorded(r.get("error"), ctx.lang)) for r in rows])
    sample = sample_answer(d)
    if sample is not None:
        card, answer = sample
        prompt = dig(d, "config", "single_prompt")
        lines += [t["sample"].format(card=num(card), prompt=code(prompt)), ""]
        lines += fenced(str(answer), "text")
    if d.get("log_dir"):
        lines += [t["logs"].format(log_dir=code(d["log_dir"])), ""]
    return lines


def sample_answer(data: dict):
    """``(card, answer)`` of the first card that answered the single prompt, or None."""
    outputs = dig(data, "outputs", default={})
    if not isinstance(outputs, dict):
        return None
    for key in sorted(outputs, key=lambda k: (len(str(k)), str(k))):
        answer = dig(outputs, key, "single")
        if answer:
            card = int(key) if str(key).isdigit() else key
            return card, answer
    return None


__all__ = ["attention_body", "backend_rows", "environment_body", "inference_body", "sample_answer"]
