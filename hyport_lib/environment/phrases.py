"""The fixed sentences of stage 01's section in the blog drafts, in English and Chinese.

Figures, names and versions come from the recorded result through the ``{placeholders}``;
no sentence holds a digit of its own.
"""

from __future__ import annotations

PHRASES = {
    "en": {
        "title": "Environment and host",
        "env_intro": "The host as stage {stage} recorded it:",
        "env_rows": {"host": "Host", "os": "Operating system", "kernel": "Kernel",
                     "container": "Inside a container", "cpu": "CPU", "cores": "CPU cores",
                     "ram": "Memory (GB)", "python": "Python", "torch": "torch",
                     "torch_npu": "torch_npu", "transformers": "transformers",
                     "deepspeed": "DeepSpeed", "cann": "CANN", "driver": "Ascend driver",
                     "firmware": "Ascend firmware", "device": "Device",
                     "cards": "Cards (or worker processes)", "model": "Model path",
                     "model_resolved": "Model folder used"},
        "not_installed": "not installed", "not_found": "not found",
        "checks_intro": ("The environment checks: {PASS} PASS, {WARN} WARN, {FAIL} FAIL and "
                         "{SKIP} SKIP (the skipped ones do not apply to this host). Those "
                         "that applied:"),
        "check": "Check", "verdict": "Verdict", "reason": "Reason",
    },
    "zh": {
        "title": "环境检查",
        "env_intro": "阶段 {stage} 记录的主机信息：",
        "env_rows": {"host": "主机", "os": "操作系统", "kernel": "内核",
                     "container": "是否在容器内", "cpu": "处理器", "cores": "处理器核数",
                     "ram": "内存（GB）", "python": "Python", "torch": "torch",
                     "torch_npu": "torch_npu", "transformers": "transformers",
                     "deepspeed": "DeepSpeed", "cann": "CANN", "driver": "昇腾驱动",
                     "firmware": "昇腾固件", "device": "设备",
                     "cards": "卡数（或工作进程数）", "model": "模型路径",
                     "model_resolved": "实际使用的模型目录"},
        "not_installed": "未安装", "not_found": "未找到",
        "checks_intro": ("环境检查结果：通过 {PASS} 项、警告 {WARN} 项、失败 {FAIL} 项、跳过 {SKIP} 项"
                         "（跳过的检查不适用于这台主机）。适用的检查如下："),
        "check": "检查项", "verdict": "结论", "reason": "原因（工具记录的英文原文）",
    },
}
