"""The fixed sentences of stage 02's section in the blog drafts, in English and Chinese.

Figures, paths and names come from the recorded result through the ``{placeholders}``;
no sentence holds a digit of its own.
"""

from __future__ import annotations

PHRASES = {
    "en": {
        "title": "Attention swap",
        "att_intro": ("The first job of a port is to find every CUDA-only construct. The "
                      "static scan read {files} file(s) under {path} and found {hits} "
                      "place(s) to change:"),
        "att_pinned": "The project pins {name} {spec}.",
        "att_clean": "The static scan read {files} file(s) under {path} and found nothing to change.",
        "att_no_scan": "The static scan did not run in this stage.",
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
        "att_behaviour": ("And its behaviour, on real weights: greedy answers of {tokens} new tokens "
                          "to {prompts} prompts and the perplexity of a fixed text, each swapped model "
                          "against eager attention in the same dtype."),
        "att_behaviour_not": "Behaviour (greedy answers, perplexity) not compared: {why}.",
        "prompt": "Prompt", "eager_answer": "Eager's answer", "pair": "Swapped",
        "identical": "Identical", "first_diff": "First difference", "ppl": "Perplexity (eager → swapped)",
        "heatmap_alt": "Attention error heatmap",
        "heatmap_caption": "Errors of each case against float64 ({label}).",
        "port_intro": ("Then the port itself, made by `hyport port` on a copy of the code: {changes} "
                       "change(s) in {files} file(s), {left} spot(s) left for a human; the ported "
                       "copy, its diff and its record are in {dst}."),
        "port_kind": "Kind of change", "port_count": "Changes",
        "port_left": "Left for a human, with the reason the tool gives:",
        "port_not_made": "The port of the code could not be made:",
        "port_proof": ("The proof builds the model {model} twice from its own config, shrunk to a "
                       "tiny random-weight model, once from the original code and once from the "
                       "port, in {dtype}, with the port's attention on {path}. Verdict: {verdict}."),
        "port_emulated": "hyport's CPU emulation of npu_fusion_attention (emulated, not an NPU result)",
        "port_on_npu": "torch_npu's npu_fusion_attention on the NPU",
        "port_proof_error": "The proof of the port could not be made:",
        "port_case": "Case", "port_bound": "Bound", "port_calls": "NPU attention calls",
        "port_tokens": "Greedy tokens identical",
    },
    "zh": {
        "title": "注意力替换",
        "att_intro": ("移植的第一步是找出所有只能在 CUDA 上运行的写法。静态扫描读取了 {path} 下的 "
                      "{files} 个文件，找到 {hits} 处需要修改："),
        "att_pinned": "项目锁定了 {name} 的版本 {spec}。",
        "att_clean": "静态扫描读取了 {path} 下的 {files} 个文件，没有发现需要修改的地方。",
        "att_no_scan": "本阶段没有运行静态扫描。",
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
        "att_behaviour": ("再看行为（真实权重）：对 {prompts} 个提示各贪心生成 {tokens} 个新词，并计算一段固定文本的"
                          "困惑度；每个替换后的模型都与同一精度下的 eager 注意力对比。"),
        "att_behaviour_not": "未比较行为（贪心回答、困惑度）：{why}。",
        "prompt": "提示", "eager_answer": "eager 的回答", "pair": "替换后",
        "identical": "完全一致", "first_diff": "首个不同之处", "ppl": "困惑度（eager → 替换后）",
        "heatmap_alt": "注意力误差热力图",
        "heatmap_caption": "各用例相对 float64 的误差（{label}）。",
        "port_intro": ("然后是移植本身：`hyport port` 在代码副本上共做了 {changes} 处修改，涉及 {files} 个文件，"
                       "另有 {left} 处留待人工处理；移植后的副本、差异文件和记录都在 {dst}。"),
        "port_kind": "修改类别", "port_count": "修改数",
        "port_left": "留待人工处理之处，以及原因（工具给出的英文原文）：",
        "port_not_made": "未能完成代码移植：",
        "port_proof": ("验证时用模型自身的配置把 {model} 缩小为随机权重的微型模型，分别由原始代码和移植后的代码"
                       "各构建一次，精度为 {dtype}，移植后的注意力运行在{path}上。结论：{verdict}。"),
        "port_emulated": " hyport 对 npu_fusion_attention 的 CPU 模拟（模拟结果，并非 NPU 实测）",
        "port_on_npu": " NPU 上的 torch_npu npu_fusion_attention ",
        "port_proof_error": "未能完成移植验证：",
        "port_case": "用例", "port_bound": "上限", "port_calls": "NPU 注意力调用次数",
        "port_tokens": "贪心解码结果一致",
    },
}
