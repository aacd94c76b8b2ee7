"""The fixed sentences of the blog drafts' frame, in English and Chinese.

Only the frame lives here (title, background, what a stage's status means, caveats,
commands); each stage's own sentences live beside the stage (its ``phrases`` module) and
the words both share in :data:`hyport_lib.drafting.draft.WORDS`. Every figure, path,
version and message comes from the run's recorded files and is filled in through the
``{placeholders}``. No sentence holds a digit of its own (a test checks), so every number
a draft shows has a recorded source.
"""

from __future__ import annotations

from hyport_lib.drafting.draft import WORDS, check_lang

TEXT = {
    "en": {
        # -- frame
        "title": "Porting notes: {model} on {device} (hyport run {run_id})",
        "title_cards": "Porting notes: {model} on {cards} {device} card(s) (hyport run {run_id})",
        "intro": ("hyport drafted this post from the recorded results of run {run_id}. "
                  "Every figure below is copied from the run's files (`results/NN_stage.json` "
                  "and `run.json`); where a figure was measured on the CPU or computed by "
                  "hyport's emulation of the NPU operator, its section says so."),
        "status": {
            "running": "The run was still going when this draft was written; sections of "
                       "stages that have not finished say so.",
            "finished": "The run finished.",
            "interrupted": "The run was stopped before it finished; the stages it did not "
                           "complete say so.",
            "killed": "The runner died before it finished; a later hyport command found it "
                      "and marked it as killed.",
        },
        "background": "Background",
        "problem": (
            "Hugging Face vision-language models are usually written for CUDA: their "
            "attention calls `flash_attn`, tensors are moved with `.cuda()`, and training "
            "scripts expect NCCL. An Ascend NPU has none of these. It has `torch_npu`, the "
            "fused attention operator `torch_npu.npu_fusion_attention`, and HCCL for "
            "communication. A port therefore removes the CUDA-only pieces, puts the NPU "
            "operator in their place, and then has to show that inference, training and the "
            "saved weights still behave. This post follows that path stage by stage: the "
            "host, the attention swap, inference on every card, a short smoke training run "
            "and the check of the saved weights."),
        "run_context": "The run used the profile {profile} on the host {host}; it started at {started}.",
        "defaults": "of the notebooks' defaults",
        "left_out": ("This run covered only part of that path: the stages {stages} were left "
                     "out of it (`--only`), so they have no section below."),
        "left_out_caveat": "Not part of this run (left out with `--only`): {stages}.",
        "remote_on": "trust_remote_code was ON: remote model code was allowed to run.",
        "remote_off": "trust_remote_code was off: no code from the model folder was run.",
        # -- stage status
        "source": "Source of figures",
        "colon": ": ", "space": " ", "list_sep": ", ",
        "verdict_names": {v: v for v in ("PASS", "WARN", "FAIL", "SKIP", "NOT RUN", "INTERRUPTED",
                                         "RUNNING", "PENDING")},  # the status words as they are
        "verdict_says": {
            "PASS": "The stage passed.",
            "WARN": "The stage finished with warnings.",
            "SKIP": "The stage was skipped.",
            "FAIL": "The stage failed. Its recorded error:",
            "INTERRUPTED": "The stage was interrupted before it finished. Its recorded error:",
            "NOT RUN": "The stage did not run: the run stopped before it.",
            "PENDING": "The stage has not run yet.",
            "RUNNING": "The stage was still running when this draft was written.",
        },
        "unknown_status": "The stage's status is {verdict}; it did not finish.",
        "no_error": "(no error was recorded)",
        "fail_judged": "The stage ran to its end and judged the result a FAIL; its own summary says why.",
        "judged_data": "What the stage recorded:",
        "summary_is": "The stage's own summary:",
        "no_result": ("No result file was recorded for this stage, so only the runner's "
                      "index figures are shown."),
        "no_figures": "No result file and no figures were recorded for this stage.",
        "bad_result": "The stage's result file could not be read:",
        "partial_data": "What the stage recorded before it failed:",
        "section_error": "This section could not be drafted from the recorded files:",
        "figure": "Figure",
        # -- caveats, commands
        "caveats": "Caveats",
        "not_npu": "Figures marked as CPU or NPU-emulated were not measured on an NPU.",
        "prov_line": "{stage}: figures {prov}.",
        "failed": "Stages that failed: {stages}. Their notebooks and logs are in the run folder.",
        "unfinished": "Stages that did not finish: {stages}.",
        "unused": "Parameters that no notebook declares (they were not used): {names}.",
        "notes": "Notes recorded by the run:",
        "figure_failed": "A figure could not be drawn:",
        "facts_failed": "What a stage recorded for the whole run could not be read:",
        "commands": "Commands to reproduce",
        "cmd_intro": "From the project folder, with the same profile and parameters:",
        "cmd_full": "Every parameter of the run is passed with -p: the profile could not be read back.",
    },
    "zh": {
        "title": "{model} 在 {device} 上的移植简记（hyport 运行 {run_id}）",
        "title_cards": "{model} 在 {cards} 张 {device} 卡上的移植简记（hyport 运行 {run_id}）",
        "intro": ("本文由 hyport 根据运行 {run_id} 的记录结果自动起草。文中所有数值都直接取自本次运行的"
                  "文件（`results/NN_stage.json` 与 `run.json`）；凡是在 CPU 上测得、或由 hyport "
                  "对 NPU 算子的仿真计算得到的数值，所在章节都会注明。"),
        "status": {
            "running": "起草本文时运行仍在进行中，尚未完成的阶段会在其章节中注明。",
            "finished": "本次运行已结束。",
            "interrupted": "本次运行在结束前被中止，未完成的阶段会在其章节中注明。",
            "killed": "运行进程在结束前意外退出，之后的 hyport 命令发现并将其标记为已终止。",
        },
        "background": "背景",
        "problem": (
            "Hugging Face 的视觉语言模型大多为 CUDA 编写：注意力调用 `flash_attn`，张量用 "
            "`.cuda()` 搬上显卡，训练脚本默认使用 NCCL。昇腾 NPU 上这些都没有，取而代之的是 "
            "`torch_npu`、融合注意力算子 `torch_npu.npu_fusion_attention` 以及负责通信的 HCCL。"
            "因此移植要做三件事：剔除只能在 CUDA 上运行的代码，换上 NPU 算子，再证明推理、训练"
            "和保存下来的权重依然正常。本文按阶段记录这一过程：主机环境、注意力替换、逐卡推理、"
            "冒烟训练以及权重校验。"),
        "run_context": "本次运行使用参数配置 {profile}，主机为 {host}，开始时间 {started}。",
        "defaults": "（笔记本默认参数）",
        "left_out": "本次运行只走了其中一部分：阶段 {stages} 未包含在内（`--only`），下文没有它们的章节。",
        "left_out_caveat": "未包含在本次运行中的阶段（用 `--only` 排除）：{stages}。",
        "remote_on": "trust_remote_code 已开启：允许运行模型仓库中的远程代码。",
        "remote_off": "trust_remote_code 未开启：没有运行模型目录中的任何代码。",
        "source": "数据来源",
        "colon": "：", "space": "", "list_sep": "、",
        "verdict_names": {"PASS": "通过", "WARN": "警告", "FAIL": "失败", "SKIP": "跳过",
                          "NOT RUN": "未运行", "INTERRUPTED": "已中断", "RUNNING": "运行中",
                          "PENDING": "等待中"},
        "verdict_says": {
            "PASS": "该阶段通过。",
            "WARN": "该阶段完成，但有警告。",
            "SKIP": "该阶段被跳过。",
            "FAIL": "该阶段失败。记录的错误如下：",
            "INTERRUPTED": "该阶段在完成前被中断。记录的错误如下：",
            "NOT RUN": "该阶段没有运行：运行在它开始之前就停止了。",
            "PENDING": "该阶段尚未运行。",
            "RUNNING": "起草本文时该阶段仍在运行。",
        },
        "unknown_status": "该阶段的状态为 {verdict}，没有完成。",
        "no_error": "（没有记录错误信息）",
        "fail_judged": "该阶段运行到了最后，并判定结果为 FAIL；原因见它自己的摘要。",
        "judged_data": "该阶段记录下的内容：",
        "summary_is": "该阶段自己的摘要：",
        "no_result": "该阶段没有留下结果文件，下面只列出运行索引中的指标。",
        "no_figures": "该阶段既没有留下结果文件，也没有记录任何数值。",
        "bad_result": "该阶段的结果文件无法读取：",
        "partial_data": "该阶段失败前记录下的内容：",
        "section_error": "无法根据记录文件起草本节：",
        "figure": "指标",
        "caveats": "注意事项",
        "not_npu": "标注为 CPU 或 NPU 仿真（emulated）的数据并非在 NPU 上测得。",
        "prov_line": "{stage}：数值{prov}。",
        "failed": "失败的阶段：{stages}。对应的笔记本和日志保存在本次运行目录中。",
        "unfinished": "没有完成的阶段：{stages}。",
        "unused": "没有任何笔记本声明、因而未被使用的参数：{names}。",
        "notes": "本次运行记录的说明（英文原文）：",
        "figure_failed": "有一张图未能生成：",
        "facts_failed": "某个阶段为整次运行记录的信息无法读取：",
        "commands": "复现命令",
        "cmd_intro": "在项目目录下，用相同的参数配置和参数运行：",
        "cmd_full": "参数配置文件无法读回，因此用 -p 传入本次运行的全部参数。",
    },
}


def frame_phrases(lang: str) -> dict:
    """The frame's sentences of ``lang`` on top of the shared words.

    Raises:
        ValueError: for a language there is no text for, naming the languages there are.
    """
    return {**WORDS[check_lang(lang)], **TEXT[lang]}
