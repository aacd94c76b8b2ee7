"""The fixed sentences of stage 04's sections in the blog drafts (the smoke training and
the dataset notes), in English and Chinese.

Figures, paths and settings come from the recorded result through the
``{placeholders}``; no sentence holds a digit of its own.
"""

from __future__ import annotations

PHRASES = {
    "en": {
        "title": "Smoke training",
        "train_intro": ("The smoke run starts the Hugging Face Trainer under DeepSpeed with "
                        "torchrun on every card. It ran with these parameters:"),
        "param": "Parameter",
        "train_rows": {"cards": "Cards (processes)", "zero": "DeepSpeed ZeRO stage",
                       "precision": "Precision", "finetuning": "Fine-tuning",
                       "lr": "Learning rate", "seq": "max_seq_len", "packing": "Packing",
                       "attention": "Attention in training",
                       "proof": "Attention proof before launch (eager vs swapped)"},
        "train_results": "Results:",
        "answers_intro": ("What the training changed, in words: greedy answers to the prompts of the "
                          "first training samples, from the model it started from and from the trained "
                          "one, beside the answer the data teaches."),
        "answers_not": "Answers before and after training are not shown: {why}.",
        "ans_prompt": "Prompt", "ans_taught": "The data's answer", "ans_before": "Before",
        "ans_after": "After",
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
        # -- the dataset notes, a section of their own after the stages
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
    },
    "zh": {
        "title": "冒烟训练",
        "train_intro": ("冒烟训练用 torchrun 在每张卡上启动 DeepSpeed 下的 Hugging Face `Trainer`，"
                        "参数如下："),
        "param": "参数",
        "train_rows": {"cards": "卡数（进程数）", "zero": "DeepSpeed ZeRO 阶段",
                       "precision": "精度", "finetuning": "微调方式",
                       "lr": "学习率", "seq": "max_seq_len", "packing": "样本拼接",
                       "attention": "训练所用注意力",
                       "proof": "启动前的注意力验证（eager 对比替换后）"},
        "train_results": "结果：",
        "answers_intro": "训练带来的变化（用文字看）：对前几条训练样本的提示，分别用训练前和训练后的模型贪心生成回答，并列出数据所教的答案。",
        "answers_not": "未给出训练前后的回答：{why}。",
        "ans_prompt": "提示", "ans_taught": "数据中的答案", "ans_before": "训练前", "ans_after": "训练后",
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
    },
}
