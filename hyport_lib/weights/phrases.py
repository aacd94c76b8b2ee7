"""The fixed sentences of stage 05's section in the blog drafts, in English and Chinese.

Figures, paths and messages come from the recorded result through the
``{placeholders}``; no sentence holds a digit of its own.
"""

from __future__ import annotations

PHRASES = {
    "en": {
        "title": "Saved weights",
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
    },
    "zh": {
        "title": "权重校验",
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
    },
}
