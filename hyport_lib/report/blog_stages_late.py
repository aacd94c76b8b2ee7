"""Sections of the training and weights stages in the seed's shape, and the dataset notes.

Training: the parameters table (the seed's 参数 | 值), the results table (exit code,
total time, ``train_loss``, step time...), the loss figure and the ``hyport train``
command. Weights: the folder's files, the seed's table (shards, index tensors, bytes and
keys per shard, model type, parameters), the reload command and what it printed
(``LOAD_OK ...``). Dataset: what stage 04 recorded of the records it trained on.
"""

from __future__ import annotations

import shlex

from hyport_lib.report.blog_data import Ctx, StageView, as_list, dig
from hyport_lib.report.blog_format import code, fenced, num, quote, recorded, table


# --------------------------------------------------------------------------- 04
def train_body(view: StageView, ctx: Ctx) -> list[str]:
    """See the module docstring."""
    t, d = ctx.t, view.data
    plan = dig(d, "plan", default={})
    config = dig(plan, "config", default={})
    summary = dig(d, "summary", default={})
    names = t["train_rows"]
    params = [(names["cards"], ctx.value(dig(plan, "world_size"))),
              (code("max_steps"), ctx.value(config.get("max_steps"))),
              (code("per_device_train_batch_size"), ctx.value(config.get("per_device_train_batch_size"))),
              (code("gradient_accumulation_steps"), ctx.value(config.get("gradient_accumulation_steps"))),
              (names["zero"], ctx.value(dig(plan, "deepspeed", "zero_stage"))),
              (names["precision"], ctx.value(plan.get("precision"))),
              (code("gradient_checkpointing"), ctx.value(config.get("gradient_checkpointing"))),
              (code("save_steps"), ctx.value(config.get("save_steps"))),
              (names["finetuning"], ctx.value(config.get("finetuning_type"))),
              (names["lr"], ctx.value(config.get("learning_rate"))),
              (names["seq"], ctx.value(config.get("max_seq_len"))),
              (names["packing"], ctx.value(config.get("packing"))),
              (names["attention"], ctx.value(plan.get("attn_implementation")))]
    lines = [t["train_intro"], ""] + table([t["param"], t["value"]], params)
    results = t["res_rows"]
    # The headline's train_loss (mean of the finite step losses); the Trainer's own figure
    # beside it only where it differs (it covers only a resumed run's last attempt and
    # counts a NaN step as 0).
    mean_loss = summary.get("mean_loss")
    trainer_loss = dig(d, "worker", "train_metrics", "train_loss")
    first, last = summary.get("first_loss"), summary.get("last_loss")
    span = f"{num(first)} → {num(last)}"
    at, end = summary.get("last_loss_step"), summary.get("last_step")
    if last is not None and at is not None and end is not None and at != end:
        span += " " + t["loss_last_finite"].format(at=at, end=end)
    rows = [(results["exit"], ctx.value(d.get("exit_code"))),
            (results["total"], ctx.value(d.get("wall_s"))),
            (results["steps"], ctx.value(summary.get("steps"))),
            (results["train_loss"], ctx.value(mean_loss))]
    if isinstance(trainer_loss, (int, float)) and (mean_loss is None
                                                   or abs(float(trainer_loss) - mean_loss) > 5e-5):
        rows.append((results["trainer_loss"], ctx.value(trainer_loss)))
    rows += [(results["loss"], span),
            (results["step_s"], ctx.value(summary.get("mean_step_s"))),
            (results["tps"], ctx.value(summary.get("tokens_per_s_per_card"))),
            (results["real_tps"], ctx.value(summary.get("real_tokens_per_s_per_card"))),
            (results["skipped"], ctx.value(summary.get("skipped_steps"))),
            (results["memory"], ctx.value(summary.get("peak_memory_mb"))),
            (results["checkpoint"], code(d.get("last_checkpoint")) if d.get("last_checkpoint") else num(None)),
            (results["final"], code(d.get("final_dir")) if d.get("final_dir") else num(None))]
    lines += [t["train_results"], ""] + table([t["item"], t["result"]], rows)
    if d.get("why"):
        lines += [t["train_why"], ""] + quote(d["why"])
    if "loss" in ctx.figures:
        lines += [f"![{t['loss_alt']}]({ctx.figures['loss']})", "",
                  f"*{t['loss_caption'].format(label=code(view.provenance.get('label', '')))}*", ""]
    elif not as_list(d.get("metrics")):
        lines += [t["no_metrics"], ""]
    command = train_command(config)
    if command:
        lines += [t["train_cmd"], ""] + fenced(command, "bash")
    return lines


def train_command(config: dict) -> str:
    """``hyport train`` with every recorded setting that differs from the command's default
    (the recorded values are the stage's; an empty ``output_dir`` means a new folder)."""
    try:
        from hyport_lib.train.config import TrainConfig

        defaults = vars(TrainConfig())
    except Exception:  # noqa: BLE001 — any failure to build the defaults: pass every setting
        defaults = {}
    words = ["hyport", "train"]
    for key, value in config.items():
        if key == "env_overrides" or value == "":
            continue  # environment overrides are not flags; "" is the flag's own default
        if key in defaults and defaults[key] == value and isinstance(defaults[key], bool) == isinstance(value, bool):
            continue
        words += ["--" + key.replace("_", "-"), "none" if value is None else _flag_text(value)]
    return " ".join(shlex.quote(w) for w in words) if config else ""


def _flag_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- 05
def weights_body(view: StageView, ctx: Ctx) -> list[str]:
    """See the module docstring."""
    t, d = ctx.t, view.data
    shards = [s for s in as_list(d.get("shards")) if isinstance(s, dict)]
    index = dig(d, "index", default={})
    path = d.get("path")
    files = ([index["file"]] if isinstance(index, dict) and index.get("file") else []) + [
        str(s.get("file")) for s in shards]
    intro = t["w_intro_reload" if d.get("reload") else "w_intro"].format(path=code(path))
    sep = " " if ctx.lang == "en" else ""  # Chinese sentences follow each other without a space
    lines = [f"{intro}{sep}{t['w_files'] if files else t['w_no_files']}", ""]
    if files:
        lines += fenced("\n".join([f"{path}/"] + [f"  {f}" for f in files]), "text")
    if d.get("source"):
        lines += [t["w_source"], ""] + quote(d["source"])
    names, head = t["w_rows"], view.headline
    rows = [(names["shards"], num(len(shards))),
            (names["index"], ctx.value(dig(index, "tensors")) if isinstance(index, dict) and index
             else ctx.value(d.get("tensor_count")))]
    for shard in shards:
        rows.append((names["shard"].format(name=code(shard.get("file"))),
                     f"{num(shard.get('bytes'))} / {num(shard.get('tensors'))}"))
    counts = dig(d, "counts", default={})
    rows += [(names["type"], ctx.value(dig(d, "config", "model_type"))),
             (names["params"], ctx.value(d.get("parameters"))),
             (names["errors"], f"{num(counts.get('error'))} / {num(counts.get('warning'))}")]
    scan = d.get("scan")
    if isinstance(scan, dict):
        rows.append((names["nonfinite"], num(len(as_list(scan.get("nonfinite_tensors"))))))
    for key, label in (("tensors changed vs base", "base"), ("checkpoint tensors identical", "ckpt"),
                       ("checkpoint max |Δ logits|", "parity"), ("ZeRO fp32→saved max |Δ|", "zero")):
        if key in head:
            rows.append((names[label], ctx.value(head[key])))
    lines += table([t["item"], t["result"]], rows)
    lines += reload_lines(d, ctx)
    findings = [f for f in as_list(d.get("findings")) if isinstance(f, dict)]
    if findings:
        lines += [t["w_findings"], ""]
        for f in findings:
            lines += quote(f"[{f.get('severity')}] {f.get('class')} — {f.get('file')}: {f.get('message')}")
    return lines


def reload_lines(data: dict, ctx: Ctx) -> list[str]:
    """The ``hyport verify --reload`` command for the folder, and what the reload printed."""
    reload = data.get("reload")
    if not isinstance(reload, dict):
        return [ctx.t["w_no_reload"], ""]
    options = dig(data, "options", default={})
    words = ["hyport", "verify", str(reload.get("path") or data.get("path")), "--reload",
             "--dtype", str(reload.get("dtype") or options.get("dtype")),
             "--attn-implementation", str(reload.get("attn_implementation") or options.get("attn_implementation"))]
    if reload.get("trust_remote_code"):
        words.append("--trust-remote-code")
    said = reload.get("line") or " ".join(str(x) for x in (reload.get("status"), reload.get("reason")) if x)
    return ([ctx.t["w_reload"], ""] + fenced(" ".join(shlex.quote(w) for w in words), "bash")
            + fenced(str(said), "text"))


# --------------------------------------------------------------------------- dataset
def dataset_body(view: StageView, ctx: Ctx) -> list[str]:
    """The records stage 04 trained on: where they came from, how many, how they were fed."""
    t = ctx.t
    plan = dig(view.data, "plan", default={})
    config, data = dig(plan, "config", default={}), dig(plan, "dataset", default={})
    where = code(data.get("path") or plan.get("dataset_path") or config.get("dataset_path"))
    lines = [(t["ds_given"] if config.get("dataset_path") else t["ds_bundled"]).format(path=where), ""]
    if data:
        lines += [t["ds_counts"].format(**{k: num(data.get(k)) for k in (
            "total", "good", "samples", "skipped", "truncated", "tokens", "label_tokens")}), ""]
    if "packing" in config:
        how = t["packed"] if config.get("packing") else t["padded"]
        lines += [t["ds_packing"].format(how=how, seq=num(config.get("max_seq_len"))), ""]
    problems = as_list(data.get("problems"))
    if problems:
        lines += [t["ds_problems"], ""]
        for problem in problems:
            lines += quote(recorded(problem, "en"))
    return lines


__all__ = ["dataset_body", "reload_lines", "train_body", "train_command", "weights_body"]
