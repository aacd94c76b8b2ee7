"""Which kernel serves a variable-length (packed) batch on a GPU: grouped SDPA or fused varlen.

Measured on one H200 (bf16, 32 heads, head dim 128, causal), the drop-in's grouped path
(one batched SDPA call per run of equal lengths, which lets SDPA pick its cuDNN / flash
kernels) against torch's fused varlen flash kernel:

======================================  =================
lengths                                  grouped / fused
======================================  =================
8 × 2048                                 0.70
8 × 4096                                 0.55
64 × 256                                 0.93
8 mixed (64 … 4000)                      0.89
16 distinct (1, 2, 3, 5, … 1597)         8.1
======================================  =================

Grouping wins while few runs of equal lengths remain and loses badly when every
sequence has its own length, the normal case of packed fine-tuning batches. The rule:
the fused kernel from :data:`FUSED_MIN_RUNS` runs on, when it can serve the call at all
(a CUDA tensor in fp16 / bf16, no dropout, a head dim it supports, no empty sequence,
and a torch that has it); grouped SDPA otherwise, and always on the CPU.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

#: From this many runs of equal (len_q, len_k) on, the fused kernel serves the batch.
FUSED_MIN_RUNS = 9
_FUSED_DTYPES = (torch.float16, torch.bfloat16)


def fused_varlen_op() -> Optional[Callable]:
    """torch's public fused varlen attention, where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def choose_path(device_type: str, dtype: torch.dtype, head_dim: int, dropout_p: float,
                runs: int, has_empty: bool, fused_available: bool) -> str:
    """``"fused"`` or ``"grouped"`` by the rule of the module docstring."""
    servable = (device_type == "cuda" and dtype in _FUSED_DTYPES and dropout_p == 0.0
                and head_dim % 8 == 0 and head_dim <= 256 and not has_empty and fused_available)
    return "fused" if servable and runs >= FUSED_MIN_RUNS else "grouped"


def fused_varlen(q, k, v, cu_q: Sequence[int], cu_k: Sequence[int], scale: float, window,
                 op: Optional[Callable] = None) -> torch.Tensor:
    """The fused kernel on packed (T, N, D) tensors with host cumulative lengths."""
    op = op or fused_varlen_op()
    lens_q = [b - a for a, b in zip(cu_q, cu_q[1:])]
    lens_k = [b - a for a, b in zip(cu_k, cu_k[1:])]
    device = q.device
    cq = torch.tensor(list(cu_q), dtype=torch.int32, device=device)
    ck = cq if list(cu_k) == list(cu_q) else torch.tensor(list(cu_k), dtype=torch.int32, device=device)
    left, right = window
    return op(q, k, v, cq, ck, max(lens_q), max(lens_k), scale=scale,
              window_size=(-1 if left is None else int(left), -1 if right is None else int(right)),
              enable_gqa=q.shape[1] != k.shape[1])
