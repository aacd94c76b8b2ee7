"""flash-attn semantics mapped onto ``torch_npu.npu_fusion_attention`` (NFA).

The mapping (see docs/npu_fusion_attention.md):

* ``softmax_scale`` -> ``scale`` (NFA's default is 1.0, never 1/sqrt(d): always passed).
* ``dropout_p`` -> ``keep_prob = 1 - dropout_p``.
* ``causal`` (bottom-right, flash-attn >= 2.1) -> ``sparse_mode=3`` with the compressed
  2048x2048 ``triu(1)`` bool mask, cached per device.
* a finite ``window_size`` -> ``sparse_mode=4`` (band, bottom-right origin) with the same
  compressed mask, ``pre_tockens=left``, ``next_tockens=right`` (unbounded = 2**31-1).
* varlen -> ``input_layout="TND"`` with ``actual_seq_qlen = cu_seqlens[1:]`` as a host
  list, converted once per ``cu_seqlens`` tensor (:mod:`hyport_lib.npu_attention.seqlens`).
* rows with no visible key (causal with Sq > Sk) are set to 0, flash-attn's rule, so
  the result does not depend on what the kernel leaves there.

The op itself comes from ``torch_npu`` (through ``try_import``) or, for the
``npu-emulated`` backend, from hyport's CPU emulation of the same contract.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from hyport_lib.npu_attention.nfa_constants import (NFA_MAX_TOKENS,
                                               compressed_causal_mask)
from hyport_lib.npu_attention.sdpa_ops import Window, leading_empty_rows

def sparse_arguments(window: Window, device) -> dict:
    """NFA ``atten_mask``/``sparse_mode``/``pre_tockens``/``next_tockens`` for a window."""
    left, right = window
    if left is None and right is None:
        return {"atten_mask": None, "sparse_mode": 0}
    if left is None and right == 0:
        return {"atten_mask": compressed_causal_mask(device), "sparse_mode": 3}
    return {
        "atten_mask": compressed_causal_mask(device),
        "sparse_mode": 4,
        "pre_tockens": NFA_MAX_TOKENS if left is None else int(left),
        "next_tockens": NFA_MAX_TOKENS if right is None else int(right),
    }


def _zero_rows(out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    # Multiply instead of writing in place: NFA's backward reads its own output.
    keep = (~rows).to(out.dtype).view(-1, *([1] * (out.dim() - 1)))
    return out * keep


def nfa_bsnd(nfa: Callable, q, k, v, scale: float, dropout_p: float, window: Window) -> torch.Tensor:
    """flash_attn_func through NFA in BSND. q: (B, Sq, N, D) -> (B, Sq, N, D)."""
    out = nfa(q, k, v, head_num=q.shape[2], input_layout="BSND", scale=float(scale),
              keep_prob=1.0 - float(dropout_p), **sparse_arguments(window, q.device))[0]
    empty = leading_empty_rows(q.shape[1], k.shape[1], window)
    if empty:
        rows = torch.zeros(q.shape[1], dtype=torch.bool, device=out.device)
        rows[:empty] = True
        out = _zero_rows(out.transpose(0, 1), rows).transpose(0, 1)
    return out


def nfa_tnd(nfa: Callable, q, k, v, cu_q: Sequence[int], cu_k: Sequence[int], scale: float,
            dropout_p: float, window: Window) -> torch.Tensor:
    """flash_attn_varlen_func through NFA in TND. ``cu_*`` are host tuples with leading 0."""
    out = nfa(q, k, v, head_num=q.shape[1], input_layout="TND", scale=float(scale),
              keep_prob=1.0 - float(dropout_p), actual_seq_qlen=list(cu_q[1:]),
              actual_seq_kvlen=list(cu_k[1:]), **sparse_arguments(window, q.device))[0]
    empty_rows = _varlen_empty_rows(cu_q, cu_k, window)
    if empty_rows:
        rows = torch.zeros(q.shape[0], dtype=torch.bool)
        for start, stop in empty_rows:
            rows[start:stop] = True
        out = _zero_rows(out, rows.to(out.device))
    return out


def _varlen_empty_rows(cu_q, cu_k, window: Window) -> list[tuple[int, int]]:
    spans = []
    for (q0, q1), (k0, k1) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        n = leading_empty_rows(q1 - q0, k1 - k0, window)
        if n:
            spans.append((q0, q0 + n))
    return spans


def nfa_bnsd_masked(nfa: Callable, q, k, v, scale: float, dropout_p: float,
                    masked: Optional[torch.Tensor], window: Window) -> torch.Tensor:
    """Dense NFA call in BNSD with an explicit ``atten_mask`` (True = masked out).

    ``masked`` is (B|1, 1, Sq, Sk) or None; without it the window rules apply.
    Returns (B, N, Sq, D).
    """
    if masked is None:
        extra = sparse_arguments(window, q.device)
    else:
        extra = {"atten_mask": masked, "sparse_mode": 0}
    return nfa(q, k, v, head_num=q.shape[1], input_layout="BNSD", scale=float(scale),
               keep_prob=1.0 - float(dropout_p), **extra)[0]
