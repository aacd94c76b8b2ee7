"""The fixed sentences of the blog drafts, in English and Chinese.

Only the frame lives here; every figure, path, version and message comes from the run's
recorded files and is filled in through the ``{placeholders}``. No sentence holds a
digit of its own (a test checks), so every number a draft shows has a recorded source.
"""

from __future__ import annotations

LANGS = ("en", "zh")

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
        "stages": {"environment": "Environment and host", "attention": "Attention swap",
                   "inference": "Inference on every card", "train": "Smoke training",
                   "weights": "Saved weights"},
        # -- stage status
        "source": "Source of figures",
        "colon": ": ", "space": " ", "list_sep": ", ",
        "prov": {"npu": "measured on an NPU",
                 "cuda": "measured on a CUDA GPU, not on an NPU",
                 "cpu": "measured on the CPU, not on an NPU",
                 "emulated": "computed by hyport's emulation of the NPU operator on {device}, "
                             "not measured on an NPU",
                 "unknown": "not recorded"},
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
        "figure": "Figure", "value": "Value",
        "yes": "yes", "no": "no", "not_installed": "not installed", "not_found": "not found",
        "none": "none",
        # -- environment
        "env_intro": "The host as stage {stage} recorded it:",
        "item": "Item",
        "env_rows": {"host": "Host", "os": "Operating system", "kernel": "Kernel",
                     "container": "Inside a container", "cpu": "CPU", "cores": "CPU cores",
                     "ram": "Memory (GB)", "python": "Python", "torch": "torch",
                     "torch_npu": "torch_npu", "transformers": "transformers",
                     "deepspeed": "DeepSpeed", "cann": "CANN", "device": "Device",
                     "cards": "Cards (or worker processes)", "model": "Model path",
                     "model_resolved": "Model folder used", "profile": "Profile"},
        "checks_intro": ("The environment checks: {PASS} PASS, {WARN} WARN, {FAIL} FAIL and "
                         "{SKIP} SKIP (the skipped ones do not apply to this host). Those "
                         "that applied:"),
        "check": "Check", "verdict": "Verdict", "reason": "Reason",
        # -- attention
        "att_intro": ("The first job of a port is to find every CUDA-only construct. The "
                      "static scan read {files} file(s) under {path} and found {hits} "
                      "place(s) to change:"),
        "att_pinned": "The project pins {name} {spec}.",
        "att_clean": "The static scan read {files} file(s) under {path} and found nothing to change.",
        "att_no_scan": "The static scan did not run in this stage.",
        "before": "before", "after": "after",
        "scan_group": "{kind} ({category}), {count} line(s); write instead{colon}{suggestion}",
        "scan_group_guard": "{kind} ({category}), {count} line(s); what it does{colon}{suggestion}",
        "scan_kinds": {
            "flash_attn": "flash-attn code", "cuda_call": "CUDA calls", "cuda_device": "CUDA devices",
            "cuda_env": "CUDA environment variables", "cuda_ext": "CUDA extensions to build",
            "nccl": "NCCL communication", "apex": "NVIDIA Apex", "xformers": "xFormers",
            "triton": "Triton kernels", "bitsandbytes": "bitsandbytes", "requirement": "dependencies",
            "unparsable": "files that could not be parsed",
            "is_cuda_guard": "is_cuda guards around attention"},
        "att_pin_mismatch": ("The drop-in served the flash-attn {served} API, whose `unpad_input` "
                             "returns a different number of values than code written for the "
                             "pinned {pinned} expects: set `flash_attn_version` to {pinned}."),
        "att_numerics": ("Then the numerics: against a float64 reference, {cases} attention "
                         "cases gave {rows} result rows as PASS/WARN/FAIL; the worst NPU error "
                         "came to {worst} of its allowed bound. These figures were {prov}."),
        "att_numerics_no_worst": ("Then the numerics: against a float64 reference, {cases} "
                                  "attention cases gave {rows} result rows as PASS/WARN/FAIL. "
                                  "These figures were {prov}."),
        "impl": "Implementation", "ran_on": "Ran on", "rows": "Rows",
        "max_abs": "Largest max |Δ|", "worst_ratio": "Worst error / bound",
        "att_model": ("On the model itself, eager attention against the swapped one "
                      "({impl}): the logits differ by at most {dlogits}, the most likely "
                      "tokens agree on a share of {top1}, greedy output identical: {greedy}, and the "
                      "swapped attention ran {calls} time(s) per forward pass."),
        "att_model_verdict": "The model-level check's verdict:",
        "heatmap_alt": "Attention error heatmap",
        "heatmap_caption": "Errors of each case against float64 ({label}).",
        # -- inference
        "inf_intro": ("Each card ran in a fresh process: load the model, then one single prompt "
                      "and one batch, timed; with no warm-up call the first of them includes "
                      "start-up. {ok} card(s) finished, {failed} failed, {timeout} timed out "
                      "and {busy} were skipped as busy. The cards' own comparison:"),
        "inf_intro_warm": ("Each card ran in a fresh process: load the model, untimed warm-up "
                      "calls (the cold first call, which measures start-up, is its own column), "
                      "then one single prompt and one batch, timed. {ok} card(s) finished, {failed} failed, {timeout} timed out "
                      "and {busy} were skipped as busy. The cards' own comparison:"),
        "card": "Card", "card_status": "Status", "load_s": "Load (s)",
        "cold_s": "Cold first call (s)",
        "first_token_s": "First token (s)", "tps": "Tokens/s", "decode_tps": "Decode tokens/s",
        "first_token_s_warm": "First token, warm (s)", "tps_warm": "Tokens/s, warm",
        "decode_tps_warm": "Decode tokens/s, warm",
        "memory": "Peak memory (MB)", "error": "Error",
        "sample": "The answer of card {card} to the prompt {prompt}:",
        "logs": "The workers' logs are under {log_dir}.",
        # -- training
        "train_intro": ("The smoke run starts the Hugging Face Trainer under DeepSpeed with "
                        "torchrun on every card. It ran with these parameters:"),
        "param": "Parameter",
        "train_rows": {"cards": "Cards (processes)", "zero": "DeepSpeed ZeRO stage",
                       "precision": "Precision", "finetuning": "Fine-tuning",
                       "lr": "Learning rate", "seq": "max_seq_len", "packing": "Packing",
                       "attention": "Attention in training"},
        "train_results": "Results:",
        "result": "Result",
        "res_rows": {"exit": "Exit code", "total": "Total time (s)", "steps": "Steps logged",
                     "train_loss": "train_loss (mean of the finite step losses)",
                     "trainer_loss": "train_loss as the Trainer reports it (its own process's steps, a NaN step as zero)",
                     "loss": "Loss, first → last",
                     "step_s": "Mean step time (s)", "tps": "Tokens/s per card",
                     "real_tps": "Real tokens/s per card", "skipped": "Steps skipped",
                     "memory": "Peak memory (MB)", "checkpoint": "Last complete checkpoint",
                     "final": "Final weights"},
        "loss_last_finite": "(last finite: step {at} of {end})",
        "train_why": "The stage's judgement:",
        "loss_alt": "Loss curve",
        "loss_caption": "Loss, learning rate and tokens/s per card by step ({label}).",
        "no_metrics": "No step was logged, so there is no loss curve.",
        "train_cmd": "The same run from the command line (the stage's parameters):",
        # -- weights
        "w_intro": "The folder {path} was checked from the safetensors headers alone.",
        "w_intro_reload": "The folder {path} was checked from the safetensors headers alone, then reloaded.",
        "w_files": "Its files:", "w_no_files": "No weight file was found in it.",
        "w_source": "Where the folder came from:",
        "w_rows": {"shards": "safetensors shards", "index": "Tensors in the index",
                   "shard": "Shard {name}: bytes / keys", "type": "Model type",
                   "params": "Parameters", "errors": "Findings: errors / warnings",
                   "nonfinite": "Tensors with NaN or Inf", "base": "Tensors changed vs the starting model",
                   "ckpt": "Checkpoint tensors identical", "parity": "Max |Δ logits| vs the checkpoint",
                   "zero": "Max |Δ| consolidated ZeRO fp32 → saved"},
        "w_reload": "The reload in a fresh process, as a command, and what it printed:",
        "w_no_reload": "The weights were not reloaded in this run.",
        "w_findings": "Findings of the check:",
        # -- dataset, caveats, commands
        "dataset": "Dataset",
        "ds_bundled": ("No dataset was given, so the smoke run used hyport's bundled smoke set, "
                       "written to {path}."),
        "ds_given": "The smoke run read {path}.",
        "ds_counts": ("It holds {total} record(s), {good} of them valid; {samples} sample(s) "
                      "were trained on ({skipped} skipped, {truncated} truncated), with {tokens} "
                      "tokens of which {label_tokens} are answer tokens that carry the loss."),
        "ds_packing": "Samples were {how} to max_seq_len {seq}.",
        "packed": "packed", "padded": "padded",
        "ds_problems": "Problems found in the records:",
        "ds_none": "There are no dataset figures: the training stage recorded no data.",
        "ds_not_in_run": "The training stage was not part of this run, so there are no dataset notes.",
        "caveats": "Caveats",
        "not_npu": "Figures marked as CPU or NPU-emulated were not measured on an NPU.",
        "prov_line": "{stage}: figures {prov}.",
        "failed": "Stages that failed: {stages}. Their notebooks and logs are in the run folder.",
        "unfinished": "Stages that did not finish: {stages}.",
        "unused": "Parameters that no notebook declares (they were not used): {names}.",
        "notes": "Notes recorded by the run:",
        "figure_failed": "A figure could not be drawn:",
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
        "stages": {"environment": "环境检查", "attention": "注意力替换",
                   "inference": "逐卡推理", "train": "冒烟训练", "weights": "权重校验"},
        "source": "数据来源",
        "colon": "：", "space": "", "list_sep": "、",
        "prov": {"npu": "在 NPU 上实测",
                 "cuda": "在 CUDA GPU 上测得，并非 NPU 实测",
                 "cpu": "在 CPU 上测得，并非 NPU 实测",
                 "emulated": "由 hyport 在 {device} 上仿真 NPU 算子计算得到，并非 NPU 实测",
                 "unknown": "未记录"},
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
        "figure": "指标", "value": "数值",
        "yes": "是", "no": "否", "not_installed": "未安装", "not_found": "未找到",
        "none": "无",
        "env_intro": "阶段 {stage} 记录的主机信息：",
        "item": "项目",
        "env_rows": {"host": "主机", "os": "操作系统", "kernel": "内核",
                     "container": "是否在容器内", "cpu": "处理器", "cores": "处理器核数",
                     "ram": "内存（GB）", "python": "Python", "torch": "torch",
                     "torch_npu": "torch_npu", "transformers": "transformers",
                     "deepspeed": "DeepSpeed", "cann": "CANN", "device": "设备",
                     "cards": "卡数（或工作进程数）", "model": "模型路径",
                     "model_resolved": "实际使用的模型目录", "profile": "参数配置"},
        "checks_intro": ("环境检查结果：通过 {PASS} 项、警告 {WARN} 项、失败 {FAIL} 项、跳过 {SKIP} 项"
                         "（跳过的检查不适用于这台主机）。适用的检查如下："),
        "check": "检查项", "verdict": "结论", "reason": "原因（工具记录的英文原文）",
        "att_intro": ("移植的第一步是找出所有只能在 CUDA 上运行的写法。静态扫描读取了 {path} 下的 "
                      "{files} 个文件，找到 {hits} 处需要修改："),
        "att_pinned": "项目锁定了 {name} 的版本 {spec}。",
        "att_clean": "静态扫描读取了 {path} 下的 {files} 个文件，没有发现需要修改的地方。",
        "att_no_scan": "本阶段没有运行静态扫描。",
        "before": "原写法", "after": "替换为",
        "scan_group": "{kind}（{category}），共 {count} 行；改法（扫描器给出的英文原文）{colon}{suggestion}",
        "scan_group_guard": "{kind}（{category}），共 {count} 行；其后果（扫描器给出的英文原文）{colon}{suggestion}",
        "scan_kinds": {
            "flash_attn": "flash-attn 代码", "cuda_call": "CUDA 调用", "cuda_device": "CUDA 设备",
            "cuda_env": "CUDA 环境变量", "cuda_ext": "需编译的 CUDA 扩展",
            "nccl": "NCCL 通信", "apex": "NVIDIA Apex", "xformers": "xFormers",
            "triton": "Triton 内核", "bitsandbytes": "bitsandbytes", "requirement": "依赖声明",
            "unparsable": "无法解析的文件",
            "is_cuda_guard": "守护注意力代码的 is_cuda 判断"},
        "att_pin_mismatch": ("替换实现提供的是 flash-attn {served} 的接口，其 `unpad_input` 的返回值个数与按所锁定的 "
                             "{pinned} 编写的代码不一致：请把 `flash_attn_version` 设为 {pinned}。"),
        "att_numerics": ("接着是数值验证：以 float64 为参照，{cases} 个注意力用例共得到 {rows} 行结果"
                         "（通过/警告/失败）；NPU 路径的最大误差为允许上限的 {worst} 倍。这些数值{prov}。"),
        "att_numerics_no_worst": ("接着是数值验证：以 float64 为参照，{cases} 个注意力用例共得到 {rows} "
                                  "行结果（通过/警告/失败）。这些数值{prov}。"),
        "impl": "实现", "ran_on": "运行位置", "rows": "行数",
        "max_abs": "最大绝对误差", "worst_ratio": "误差与上限之比（最大）",
        "att_model": ("在模型层面，把 eager 注意力与替换后的注意力（{impl}）对比：logits 最大相差 "
                      "{dlogits}，首选词一致的比例为 {top1}，贪心解码输出完全一致：{greedy}；每次前向"
                      "中替换后的注意力被调用 {calls} 次。"),
        "att_model_verdict": "模型层面检查的结论（工具记录的英文原文）：",
        "heatmap_alt": "注意力误差热力图",
        "heatmap_caption": "各用例相对 float64 的误差（{label}）。",
        "inf_intro": ("每张卡在独立的新进程中运行：加载模型，再计时运行单条提问和一批提问；没有预热调用，"
                      "其中第一次调用包含启动开销。完成 {ok} 张，失败 "
                      "{failed} 张，超时 {timeout} 张，因被占用而跳过 {busy} 张。各卡输出的比对结果："),
        "inf_intro_warm": ("每张卡在独立的新进程中运行：加载模型，先做不计时的预热调用（冷启动的首次调用衡量的是启动开销，单列一栏），"
                      "再计时运行单条提问和一批提问。完成 {ok} 张，失败 "
                      "{failed} 张，超时 {timeout} 张，因被占用而跳过 {busy} 张。各卡输出的比对结果："),
        "card": "卡", "card_status": "状态", "load_s": "加载耗时（秒）",
        "cold_s": "冷启动首次调用（秒）",
        "first_token_s": "首词耗时（秒）", "tps": "每秒词元数", "decode_tps": "解码每秒词元数",
        "first_token_s_warm": "首词耗时，预热后（秒）", "tps_warm": "每秒词元数（预热后）",
        "decode_tps_warm": "解码每秒词元数（预热后）",
        "memory": "峰值内存（MB）", "error": "错误（记录原文）",
        "sample": "第 {card} 号卡对提问 {prompt} 的回答：",
        "logs": "各工作进程的日志位于 {log_dir}。",
        "train_intro": ("冒烟训练用 torchrun 在每张卡上启动 DeepSpeed 下的 Hugging Face `Trainer`，"
                        "参数如下："),
        "param": "参数",
        "train_rows": {"cards": "卡数（进程数）", "zero": "DeepSpeed ZeRO 阶段",
                       "precision": "精度", "finetuning": "微调方式",
                       "lr": "学习率", "seq": "max_seq_len", "packing": "样本拼接",
                       "attention": "训练所用注意力"},
        "train_results": "结果：",
        "result": "结果",
        "res_rows": {"exit": "退出码", "total": "总耗时（秒）", "steps": "记录的步数",
                     "train_loss": "train_loss（各步有限损失的均值）",
                     "trainer_loss": "Trainer 自报的 train_loss（仅本进程的步数，NaN 步按零计）",
                     "loss": "损失：首步 → 末步",
                     "step_s": "平均单步耗时（秒）", "tps": "每卡每秒词元数",
                     "real_tps": "每卡每秒有效词元数", "skipped": "被跳过的步数",
                     "memory": "峰值内存（MB）", "checkpoint": "最后一个完整检查点",
                     "final": "最终权重"},
        "loss_last_finite": "（最后一个有限值在第 {at} 步，共 {end} 步）",
        "train_why": "该阶段的判断：",
        "loss_alt": "损失曲线",
        "loss_caption": "各步的损失、学习率与每卡每秒词元数（{label}）。",
        "no_metrics": "没有记录到任何一步，因此没有损失曲线。",
        "train_cmd": "在命令行上复现同一次训练（该阶段的参数）：",
        "w_intro": "只读 safetensors 文件头检查了目录 {path}。",
        "w_intro_reload": "先只读 safetensors 文件头检查目录 {path}，再重新加载。",
        "w_files": "目录中的文件：", "w_no_files": "目录中没有找到权重文件。",
        "w_source": "该目录的来源：",
        "w_rows": {"shards": "safetensors 分片", "index": "索引张量数",
                   "shard": "分片 {name}：字节数 / 键数", "type": "模型类型",
                   "params": "模型参数量", "errors": "问题：错误 / 警告",
                   "nonfinite": "含 NaN 或 Inf 的张量", "base": "相对初始模型改变的张量",
                   "ckpt": "与检查点一致的张量", "parity": "与检查点的 logits 最大差值",
                   "zero": "ZeRO 合并的 fp32 与保存值的最大差值"},
        "w_reload": "在新进程中重新加载的命令及其输出：",
        "w_no_reload": "本次运行没有重新加载权重。",
        "w_findings": "检查发现的问题：",
        "dataset": "数据集说明",
        "ds_bundled": "没有指定数据集，冒烟训练使用了 hyport 自带的冒烟数据，写入 {path}。",
        "ds_given": "冒烟训练读取的数据集为 {path}。",
        "ds_counts": ("共 {total} 条记录，其中 {good} 条有效；参与训练的样本 {samples} 条（跳过 {skipped} 条，"
                      "截断 {truncated} 条），共 {tokens} 个词元，其中 {label_tokens} 个为计算损失的回答词元。"),
        "ds_packing": "样本按 max_seq_len {seq} {how}。",
        "packed": "拼接打包", "padded": "填充对齐",
        "ds_problems": "记录中发现的问题：",
        "ds_none": "没有数据集的数值：训练阶段没有记录数据。",
        "ds_not_in_run": "本次运行不包含训练阶段，因此没有数据集说明。",
        "caveats": "注意事项",
        "not_npu": "标注为 CPU 或 NPU 仿真（emulated）的数据并非在 NPU 上测得。",
        "prov_line": "{stage}：数值{prov}。",
        "failed": "失败的阶段：{stages}。对应的笔记本和日志保存在本次运行目录中。",
        "unfinished": "没有完成的阶段：{stages}。",
        "unused": "没有任何笔记本声明、因而未被使用的参数：{names}。",
        "notes": "本次运行记录的说明（英文原文）：",
        "figure_failed": "有一张图未能生成：",
        "commands": "复现命令",
        "cmd_intro": "在项目目录下，用相同的参数配置和参数运行：",
        "cmd_full": "参数配置文件无法读回，因此用 -p 传入本次运行的全部参数。",
    },
}


def phrases(lang: str) -> dict:
    """The fixed sentences of ``lang``; a ValueError names the languages there are."""
    if lang not in TEXT:
        raise ValueError(f"lang={lang!r}: expected one of {', '.join(LANGS)}")
    return TEXT[lang]


__all__ = ["LANGS", "TEXT", "phrases"]
