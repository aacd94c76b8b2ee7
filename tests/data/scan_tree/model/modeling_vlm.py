"""A VLM that still assumes CUDA (fixture: planted hits at known lines).

The docstring mentions flash_attn, "cuda" and nccl in prose: not findings.
"""
import os

import torch
import torch.distributed as dist
from flash_attn import flash_attn_varlen_func
from flash_attn.bert_padding import pad_input, unpad_input

# A comment that says: from flash_attn import flash_attn_func (not a finding).
NOTE = "we used to call flash_attn here"


def attention(q, k, v, cu_seqlens, max_len):
    out = flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, causal=True)
    return out


def setup(rank):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(rank)
    model = torch.nn.Linear(4, 4).cuda()
    x = torch.zeros(2, 4, device="cuda")
    y = x.to("cuda:1")
    device = torch.device(f"cuda:{rank}")
    if x.is_cuda:
        torch.cuda.synchronize()
    return model, y, device


def load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="flash_attention_2", device_map="cuda")
