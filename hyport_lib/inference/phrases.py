"""The fixed sentences of stage 03's section in the blog drafts, in English and Chinese.

Figures and texts come from the recorded result through the ``{placeholders}``; no
sentence holds a digit of its own.
"""

from __future__ import annotations

PHRASES = {
    "en": {
        "title": "Inference on every card",
        "inf_intro": ("Each card ran in a fresh process: load the model, then one single prompt "
                      "and one batch, timed; with no warm-up call the first of them includes "
                      "start-up. {ok} card(s) finished, {failed} failed, {timeout} timed out "
                      "and {busy} were skipped as busy. The cards' own comparison:"),
        "inf_intro_warm": ("Each card ran in a fresh process: load the model, untimed warm-up "
                           "calls (the cold first call, which measures start-up, is its own column), "
                           "then one single prompt and one batch, timed. {ok} card(s) finished, "
                           "{failed} failed, {timeout} timed out "
                           "and {busy} were skipped as busy. The cards' own comparison:"),
        "card": "Card", "card_status": "Status", "load_s": "Load (s)",
        "cold_s": "Cold first call (s)",
        "first_token_s": "First token (s)", "tps": "Tokens/s", "decode_tps": "Decode tokens/s",
        "first_token_s_warm": "First token, warm (s)", "tps_warm": "Tokens/s, warm",
        "decode_tps_warm": "Decode tokens/s, warm",
        "memory": "Peak memory (MB)", "error": "Error",
        "sample": "The answer of card {card} to the prompt {prompt}:",
        "sample_random": ("The answer of card {card} to the prompt {prompt} ({why}: it only shows that "
                          "every card gives the same text):"),
        "logs": "The workers' logs are under {log_dir}.",
        "attention": "Every card ran the attention {name}.",
        "attention_note": "The plan's attention decision (a CPU proof):",
    },
    "zh": {
        "title": "逐卡推理",
        "inf_intro": ("每张卡在独立的新进程中运行：加载模型，再计时运行单条提问和一批提问；没有预热调用，"
                      "其中第一次调用包含启动开销。完成 {ok} 张，失败 "
                      "{failed} 张，超时 {timeout} 张，因被占用而跳过 {busy} 张。各卡输出的比对结果："),
        "inf_intro_warm": ("每张卡在独立的新进程中运行：加载模型，先做不计时的预热调用（冷启动的首次调用衡量的是启动开销，"
                           "单列一栏），再计时运行单条提问和一批提问。完成 {ok} 张，失败 "
                           "{failed} 张，超时 {timeout} 张，因被占用而跳过 {busy} 张。各卡输出的比对结果："),
        "card": "卡", "card_status": "状态", "load_s": "加载耗时（秒）",
        "cold_s": "冷启动首次调用（秒）",
        "first_token_s": "首词耗时（秒）", "tps": "每秒词元数", "decode_tps": "解码每秒词元数",
        "first_token_s_warm": "首词耗时，预热后（秒）", "tps_warm": "每秒词元数（预热后）",
        "decode_tps_warm": "解码每秒词元数（预热后）",
        "memory": "峰值内存（MB）", "error": "错误（记录原文）",
        "sample": "第 {card} 号卡对提问 {prompt} 的回答：",
        "sample_random": "第 {card} 号卡对提问 {prompt} 的回答（{why}；它只说明各卡输出的文本相同）：",
        "logs": "各工作进程的日志位于 {log_dir}。",
        "attention": "各卡使用的注意力实现：{name}。",
        "attention_note": "规划阶段对注意力的决定（在 CPU 上的验证，记录原文）：",
    },
}
