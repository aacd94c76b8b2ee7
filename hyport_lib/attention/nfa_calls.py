"""The ``npu_fusion_attention`` calls a port writes for each comparison case.

This is the NPU side of the comparison: the case's tensors in its NPU layout, the NPU
mask convention (True = masked out) and sparse mode, and ``actual_seq_*`` without the
leading 0. Causal and band cases take the same sparse arguments as hyport's flash-attn
drop-in (:func:`~hyport_lib.port.generated.flash_attn_ascend.nfa_sparse_arguments`);
padded batches and bidirectional spans need a full mask or a second call, written out here.
"""

from __future__ import annotations

from typing import Callable

import torch

from hyport_lib.npu_attention import reference as R
from hyport_lib.attention.case_data import CaseData
from hyport_lib.attention.cases import AttentionCase
from hyport_lib.port.generated.flash_attn_ascend import (compressed_causal_mask,
                                                         nfa_sparse_arguments, resolve_window)


def _mask_arguments(case: AttentionCase, compressed: torch.Tensor) -> dict:
    """``atten_mask`` / ``sparse_mode`` / band of the case's flash-attn causal + window."""
    args = nfa_sparse_arguments(resolve_window(case.causal, case.window_size), compressed.device)
    if args["atten_mask"] is not None:
        args["atten_mask"] = compressed  # the caller's mask object (the emulation checks it)
    return args


def nfa_mapping(case: AttentionCase, data: CaseData, device,
                compressed: torch.Tensor) -> list[dict]:
    """The ``npu_fusion_attention`` calls that compute ``case`` (what a port writes), with
    ``compressed`` the 2048x2048 ``triu(ones, 1)`` mask the sparse modes 2-4 take. Each call
    is a dict of the tensors in the NPU layout and keyword arguments, and ``rows``: None
    (its output is the answer) or, for the write-back of bidirectional spans in packed
    batches, the global token rows it overwrites."""
    dev = torch.device(device)
    q, k, v = data.q.to(dev), data.k.to(dev), data.v.to(dev)
    base = dict(head_num=case.nq, input_layout=case.layout, scale=case.scale)
    if case.batch == "packed":
        qt, kt, vt = (R.from_bnsd(x, "TND") for x in (q, k, v))
        call = dict(query=qt, key=kt, value=vt, **base,
                    actual_seq_qlen=R.cumulative_lengths(case.lengths_q),
                    actual_seq_kvlen=R.cumulative_lengths(case.lengths_kv),
                    **_mask_arguments(case, compressed))
        calls = [dict(call, rows=None)]
        if case.mask == "spans" and any(e > s for spans in case.spans for s, e in spans):
            calls.append(_span_writeback(case, qt, kt, vt, base))
        return calls
    args = dict(query=R.from_bnsd(q, case.layout), key=R.from_bnsd(k, case.layout),
                value=R.from_bnsd(v, case.layout), **base, rows=None)
    mode = case.npu_sparse_mode
    if case.batch == "padded" or case.mask == "spans":
        # Full B1SS mask, True = masked: the keep mask inverted (THE conversion).
        args.update(atten_mask=R.to_npu_mask(data.keep).to(dev), sparse_mode=1)
        return [args]
    args.update(_mask_arguments(case, compressed))
    if case.mask == "band" and mode == 0:
        # A full mask plus the band from the top-left (equal to bottom-right when Sq == Skv).
        keep = R.window_mask(case.sq, case.skv, case.window, device=dev)
        args.update(atten_mask=R.to_npu_mask(keep), sparse_mode=0)
    elif case.mask == "causal" and mode is not None:
        args["sparse_mode"] = mode
    return [args]


def _span_writeback(case: AttentionCase, qt, kt, vt, base: dict) -> dict:
    """Visual spans in a packed batch: the span's queries attend the sample's prefix and
    the whole span with no mask; their rows then overwrite the causal output."""
    q_rows, kv_rows, lq, lk = [], [], [], []
    offset = 0
    for n, spans in zip(case.lengths_q, case.spans):
        for s, e in spans:
            if e <= s:
                continue
            q_rows += list(range(offset + s, offset + e))
            kv_rows += list(range(offset, offset + e))
            lq.append(e - s)
            lk.append(e)
        offset += n
    qi = torch.tensor(q_rows, device=qt.device)
    ki = torch.tensor(kv_rows, device=qt.device)
    return dict(query=qt[qi], key=kt[ki], value=vt[ki], **base,
                actual_seq_qlen=R.cumulative_lengths(lq),
                actual_seq_kvlen=R.cumulative_lengths(lk), rows=qi)


def run_nfa(fn: Callable, case: AttentionCase, data: CaseData, device) -> torch.Tensor:
    """Run ``case`` through an ``npu_fusion_attention`` implementation ``fn``."""
    out = None
    for call in nfa_mapping(case, data, device, compressed_causal_mask(device)):
        rows = call.pop("rows")
        res = fn(**call)[0]
        if rows is None:
            out = res
        else:
            out = out.clone()
            out[rows] = res
    return R.to_bnsd(out, case.layout, case.nq)
