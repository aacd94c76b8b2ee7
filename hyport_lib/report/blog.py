"""Blog-post drafts of a run, in English (``blog.md``) and Chinese (``blog.zh.md``).

The shape follows a bring-up write-up: context, one section per stage with its
verdict, summary and headline figures, then caveats. Recorded texts (summaries,
figures, errors) are kept as the stages wrote them; only the frame is translated.
Every figure keeps its provenance, so a CPU or emulated number is never shown as an
NPU one.
"""

from __future__ import annotations

from hyport_lib.report.run import ReportRun
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_text

PHRASES = {
    "en": {
        "title": "Porting notes: hyport run {run_id}",
        "context": "Context", "profile": "Profile", "defaults": "notebook defaults",
        "device": "Device", "model": "model", "software": "Software",
        "remote_on": "trust_remote_code was ON: remote model code was allowed to run.",
        "remote_off": "trust_remote_code was off.",
        "source": "Source of figures", "figure": "figure", "value": "value",
        "caveats": "Caveats",
        "not_npu": "Figures marked as CPU or NPU-emulated were not measured on an NPU.",
        "failed": "Stages that failed: {stages}. Their notebooks and logs are in the run folder.",
        "stages": {"environment": "Environment", "attention": "Attention swap",
                   "inference": "Inference on every card", "train": "Smoke training",
                   "weights": "Saved weights"},
    },
    "zh": {
        "title": "移植记录：hyport 运行 {run_id}",
        "context": "背景", "profile": "参数配置", "defaults": "笔记本默认参数",
        "device": "设备", "model": "模型", "software": "软件版本",
        "remote_on": "trust_remote_code 已开启：允许运行模型仓库中的远程代码。",
        "remote_off": "trust_remote_code 未开启。",
        "source": "数据来源", "figure": "指标", "value": "数值",
        "caveats": "注意事项",
        "not_npu": "标注为 CPU 或 NPU 仿真（emulated）的数据并非在 NPU 上测得。",
        "failed": "失败的阶段：{stages}。对应的笔记本和日志保存在本次运行目录中。",
        "stages": {"environment": "环境检查", "attention": "注意力替换",
                   "inference": "逐卡推理", "train": "冒烟训练", "weights": "权重校验"},
    },
}


def _md_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _stage_title(stage_id: str, phrases: dict) -> str:
    number, _, name = stage_id.partition("_")
    return f"{number} {phrases['stages'].get(name, name)}"


def render_blog(run: ReportRun, lang: str = "en") -> str:
    """The draft as Markdown; ``lang`` is ``en`` or ``zh``."""
    if lang not in PHRASES:
        raise ValueError(f"lang={lang!r}: expected one of {', '.join(PHRASES)}")
    p = PHRASES[lang]
    params = run.parameters
    lines = [f"# {p['title'].format(run_id=run.run_id)}", "", f"## {p['context']}", "",
             f"- {p['profile']}: `{run.profile or p['defaults']}`",
             f"- {p['device']}: `{params.get('device', 'auto')}`, {p['model']}: "
             f"`{params.get('model_path', 'tiny')}`",
             f"- {p['software']}: " + ", ".join(f"{k} {v}" for k, v in run.versions.items() if v),
             f"- {p['remote_on'] if params.get('trust_remote_code') else p['remote_off']}", ""]
    for s in run.stages:
        lines += [f"## {_stage_title(s.stage, p)} — {s.verdict}", ""]
        if s.summary:
            lines += [s.summary, ""]
        if s.provenance:
            lines += [f"_{p['source']}: {s.provenance.get('label')}_", ""]
        if s.headline:
            lines += [f"| {p['figure']} | {p['value']} |", "|---|---|"]
            lines += [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in s.headline.items()]
            lines.append("")
        if s.error:
            lines += ["```", s.error, "```", ""]
    lines += [f"## {p['caveats']}", "", f"- {p['not_npu']}"]
    failed = [s.stage for s in run.stages if s.verdict == "FAIL"]
    if failed:
        lines.append(f"- {p['failed'].format(stages=', '.join(failed))}")
    return scrub_text("\n".join(lines) + "\n")


def write_blog_drafts(run: ReportRun) -> list:
    """``blog.md`` and ``blog.zh.md`` in the run folder."""
    return [atomic_write_text(run.run_dir / name, render_blog(run, lang))
            for name, lang in (("blog.md", "en"), ("blog.zh.md", "zh"))]
