"""A case's tensors: seeded inputs, its keep mask and the float64 reference output.

Everything is in canonical BNSD form (a packed batch is ``[1, N, T, D]``); backends
convert to their own layouts (see :mod:`hyport_lib.attention.nfa_calls`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyport_lib.npu_attention import reference as R
from hyport_lib.attention.cases import AttentionCase


@dataclass
class CaseData:
    """Inputs in canonical BNSD form (packed: ``[1, N, T, D]``), already in the case dtype."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    keep: torch.Tensor  # bool, True = attend, broadcastable to [B, Nq, Sq, Skv]
    ref: torch.Tensor  # float64 reference output
    empty_rows: torch.Tensor  # [B, Nq, Sq] rows that attend nothing
    valid_rows: torch.Tensor  # [B, Nq, Sq] rows whose output is compared


def _global_spans(case: AttentionCase) -> list[tuple[int, int]]:
    """The spans of every sample as token ranges of the packed batch."""
    out, offset = [], 0
    for n, spans in zip(case.lengths_q, case.spans):
        out += [(offset + s, offset + e) for s, e in spans]
        offset += n
    return out


def case_keep_mask(case: AttentionCase) -> torch.Tensor:
    """The case's keep mask (True = attend) for the canonical tensors."""
    if case.batch == "packed":
        keep = R.block_diagonal_mask(case.lengths_q, case.lengths_kv, causal=case.causal,
                                     window_size=case.window_size)
        if case.mask == "spans":
            keep = R.bidirectional_span_mask(0, _global_spans(case), base=keep)
        return keep.view(1, 1, *keep.shape)
    keep = R.padded_mask(case.lengths_q, case.lengths_kv, case.sq, case.skv, causal=case.causal,
                         window_size=case.window_size)
    if case.mask == "spans":
        for b, spans in enumerate(case.spans):
            keep[b] = R.bidirectional_span_mask(0, spans, base=keep[b])
    return keep


def make_case_data(case: AttentionCase, seed: int = 0) -> CaseData:
    """Seeded inputs (drawn in fp32, rounded to the case dtype) and the float64 reference."""
    g = torch.Generator().manual_seed(seed)
    if case.batch == "packed":
        b, sq, skv = 1, sum(case.lengths_q), sum(case.lengths_kv)
    else:
        b, sq, skv = len(case.lengths_q), case.sq, case.skv
    dt = case.torch_dtype
    q = torch.randn(b, case.nq, sq, case.head_dim, generator=g).to(dt)
    k = torch.randn(b, case.nkv, skv, case.head_dim, generator=g).to(dt)
    v = torch.randn(b, case.nkv, skv, case.head_dim, generator=g).to(dt)
    keep = case_keep_mask(case)
    res = R.attention_reference(q, k, v, keep, scale=case.scale, return_stats=True)
    return CaseData(q, k, v, keep, res.out, res.empty_rows, valid_rows=~res.empty_rows)
