"""The generated module's functions on their own, against hyport's reference semantics
of flash-attn: what a tiny model's forward may not reach (GQA, windows, fewer or more
queries than keys, varlen with different lengths, flash-attn 1.x's top-left causal,
dropout reaching the kernel as ``keep_prob``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hyport_lib.backend import import_torch_npu
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.port.outputs import compare_outputs

NAME = "attention functions (GQA, windows, Sq != Sk, varlen, 1.x causal, dropout)"


@dataclass
class FunctionCheck:
    """The worst error over the calls, its bound, the NPU calls made, what failed."""

    max_abs: float
    bound: float
    npu_calls: int
    problems: list[str] = field(default_factory=list)


def check_functions(generated) -> FunctionCheck:
    """The checks of the module docstring, on the NPU path, in float32."""
    reference = FlashAttnAPI("sdpa")
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    q, k, v = rand(2, 7, 4, 32), rand(2, 5, 2, 32), rand(2, 5, 2, 32)
    tq, tk, tv = rand(9, 4, 32), rand(12, 2, 32), rand(12, 2, 32)
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 12], dtype=torch.int32)
    calls: list = []
    for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (3, 1)), (True, (2, -1))):
        calls.append(("flash_attn_func", (q, k, v), {"causal": causal, "window_size": window}))
        calls.append(("flash_attn_func", (k.repeat(1, 1, 2, 1), q, q), {"causal": causal,
                                                                         "window_size": window}))
        calls.append(("flash_attn_varlen_func", (tq, tk, tv, cu_q, cu_k, 5, 7),
                      {"causal": causal, "window_size": window}))
    calls.append(("flash_attn_varlen_func", (tq, tk, tv, cu_q, cu_k, 5, 7),
                  {"softmax_scale": 0.3, "causal": True}))
    calls.append(("flash_attn_unpadded_func", (tq, tk, tv, cu_q, cu_k, 5, 7, 0.0), {"causal": True}))
    worst, bound, before, problems = 0.0, 0.0, generated.CALLS["npu"], []
    problems += _dropout_problems(generated, q, k, v, tq, tk, tv, cu_q, cu_k)
    for name, args, kwargs in calls:
        try:
            out = getattr(generated, name)(*args, **kwargs)
        except Exception as exc:  # a broken mapping: the case fails, naming the call
            problems.append(f"{name}({kwargs}): {type(exc).__name__}: {exc}")
            continue
        want = getattr(reference, name)(*args, **kwargs)
        max_abs, limit, _, finite = compare_outputs(want, out, torch.float32)
        worst, bound = max(worst, max_abs), max(bound, limit)
        if not finite or not max_abs <= limit:
            problems.append(f"{name}({kwargs}): max|diff| {max_abs:.3g} > {limit:.3g}")
    return FunctionCheck(worst, bound, generated.CALLS["npu"] - before, problems)


def _dropout_problems(generated, q, k, v, tq, tk, tv, cu_q, cu_k) -> list[str]:
    """``dropout_p`` must reach the kernel as ``keep_prob = 1 - dropout_p`` (the output is
    random, the argument is not: it is recorded on its way to the kernel)."""
    previous = generated.npu_fusion_attention
    inner = previous if previous is not None else import_torch_npu()[0].npu_fusion_attention
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("keep_prob"))
        return inner(*args, **kwargs)

    generated.npu_fusion_attention = recording
    try:
        generated.flash_attn_func(q, k, v, dropout_p=0.25)
        generated.flash_attn_varlen_func(tq, tk, tv, cu_q, cu_k, 5, 7, dropout_p=0.25)
    except Exception as exc:  # a broken mapping: named in the grid's case
        return [f"dropout: {type(exc).__name__}: {exc}"]
    finally:
        generated.npu_fusion_attention = previous
    if seen != [0.75, 0.75]:
        return [f"dropout_p=0.25 reached the kernel as keep_prob={seen} (expected 0.75)"]
    return []
