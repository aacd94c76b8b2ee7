"""The attention implementations stage 02 compares, and which of them this host has
(:func:`available_implementations`). ``npu-emulated`` and ``npu`` are given the calls a port
writes by hand (:func:`nfa_mapping`); ``flash_attn`` is the real package, on CUDA only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from hyport_lib.attention.cases import AttentionCase, CaseData
from hyport_lib.backend import get_backend, npu_fusion_attention_op
from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.flash_api import DEFAULT_VERSION, FlashAttnAPI, make_unpad_input
from hyport_lib.port.generated.flash_attn_ascend import (compressed_causal_mask, nfa_sparse_arguments,
                                                         pad_input, repeat_kv, resolve_window, unpad_input)
from hyport_lib.utils.imports import is_flash_attn_available, legacy_unpad


@dataclass
class Implementation:
    """Not a device backend (those are :mod:`hyport_lib.backend`'s). ``run(case, data,
    device)`` returns the output in BNSD form, or None when the implementation cannot express
    the case (no row is produced)."""

    name: str
    source: str  # e.g. "npu-emulated (CPU)"
    device: str
    run: Callable
    emulated: bool = False
    #: dtypes the contract leaves optional here: an error on them is a SKIP, not a FAIL
    #: (NFA takes float32 only in newer CANN releases).
    optional_dtypes: tuple = ()


def device_label(device: str) -> str:
    """``npu:0`` -> ``NPU``: how a device is named in a row's source."""
    kind = str(device).split(":")[0]
    return {"cpu": "CPU", "cuda": "CUDA", "npu": "NPU"}.get(kind, kind.upper())


def eager_attention(q, k, v, keep, scale):
    """flash-attn's ``out_pt`` (its ``attention_ref(upcast=False, reorder_ops=True)``): scale
    folded into q first, softmax in the dtype, fully masked rows set to 0."""
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups, 1), repeat_kv(v, groups, 1)
    scores = torch.matmul(q * scale, k.transpose(-1, -2))
    keep = keep.expand_as(scores)
    scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = probs.masked_fill(~keep.any(-1, keepdim=True), 0.0)  # no NaN for empty rows
    return torch.matmul(probs.to(v.dtype), v)


def _inputs_on(data: CaseData, device):
    dev = torch.device(device)
    return dev, data.q.to(dev), data.k.to(dev), data.v.to(dev)


def _run_eager(case, data, device):
    dev, q, k, v = _inputs_on(data, device)
    return eager_attention(q, k, v, data.keep.to(dev), case.scale)


def _run_sdpa(case, data, device):
    dev, q, k, v = _inputs_on(data, device)
    k, v = repeat_kv(k, case.nq // case.nkv, 1), repeat_kv(v, case.nq // case.nkv, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=data.keep.to(dev), scale=case.scale)


def run_flash_style(api, case: AttentionCase, data: CaseData, device,
                    unpad=unpad_input) -> Optional[torch.Tensor]:
    """``case`` through ``api``'s ``flash_attn_func`` / ``flash_attn_varlen_func``; padded
    batches through unpad -> varlen -> pad, as code written for the served flash-attn version
    calls them (``unpad`` returns 4 values before 2.7, 5 from 2.7 on)."""
    if not case.flash_expressible:
        return None
    dev, q, k, v = _inputs_on(data, device)
    kw = dict(softmax_scale=case.scale, causal=case.mask == "causal", window_size=case.window_size)
    if case.batch == "dense":
        out = api.flash_attn_func(*(R.from_bnsd(x, "BSND") for x in (q, k, v)), **kw)
        return R.to_bnsd(_first(out), "BSND")
    if case.batch == "packed":
        qt, kt, vt = (R.from_bnsd(x, "TND") for x in (q, k, v))
        cu_q, cu_k = (torch.tensor(R.cumulative_lengths(n, True), dtype=torch.int32, device=dev)
                      for n in (case.lengths_q, case.lengths_kv))
    else:  # padded: flash-attn's bert_padding, as a port of padded code calls it
        real_q = R.padding_mask(case.lengths_q, case.sq, device=dev)
        real_k = R.padding_mask(case.lengths_kv, case.skv, device=dev)
        qt, rows_q, cu_q = unpad(R.from_bnsd(q, "BSND"), real_q)[:3]
        kt, _, cu_k = unpad(R.from_bnsd(k, "BSND"), real_k)[:3]
        vt = unpad(R.from_bnsd(v, "BSND"), real_k)[0]
    out = _first(api.flash_attn_varlen_func(qt, kt, vt, cu_q, cu_k, case.sq, case.skv, **kw))
    if case.batch == "packed":
        return R.to_bnsd(out, "TND")
    return R.to_bnsd(pad_input(out, rows_q, len(case.lengths_q), case.sq), "BSND")


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _mask_arguments(case: AttentionCase, compressed: torch.Tensor) -> dict:
    """The drop-in's own sparse arguments of the case's causal + window."""
    args = nfa_sparse_arguments(resolve_window(case.causal, case.window_size), compressed.device)
    if args["atten_mask"] is not None:
        args["atten_mask"] = compressed  # the caller's mask object (the emulation checks it)
    return args


def nfa_mapping(case: AttentionCase, data: CaseData, device,
                compressed: torch.Tensor) -> list[dict]:
    """The ``npu_fusion_attention`` calls that compute ``case`` (what a port writes: the NPU
    layout, True = masked out, ``actual_seq_*`` without the leading 0), with ``compressed``
    the 2048x2048 ``triu(ones, 1)`` mask the sparse modes 2-4 take; padded batches and
    bidirectional spans need a full mask or a second call. ``rows`` of a call: None (its
    output is the answer) or the token rows a packed batch's span write-back overwrites."""
    dev, q, k, v = _inputs_on(data, device)
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


def available_implementations(device: str = "auto",
                              flash_attn_version: Optional[str] = None) -> list[Implementation]:
    """``device``: where eager / sdpa run; ``flash_attn_version``: the flash-attn API the
    drop-in serves."""
    host = get_backend(device)
    kind, dev = host.kind, host.device(0)
    backends = [
        Implementation("eager", f"eager ({device_label(kind)})", dev, _run_eager),
        Implementation("sdpa", f"sdpa ({device_label(kind)})", dev, _run_sdpa),
        Implementation("npu-emulated", "npu-emulated (CPU)", "cpu",
                       # looked up per call, so a test can count or replace the emulation
                       lambda c, d, x: run_nfa(emulation.npu_fusion_attention, c, d, x),
                       emulated=True),
    ]
    if kind == "npu":
        op = npu_fusion_attention_op()
        backends.append(Implementation("npu", "npu (NPU)", dev, lambda c, d, x: run_nfa(op, c, d, x),
                                       optional_dtypes=("float32",)))
    backends.append(_flash_api_backend(kind, dev, flash_attn_version))
    if kind == "cuda" and is_flash_attn_available():
        import flash_attn

        backends.append(Implementation("flash_attn", "flash_attn (CUDA)", dev,
                                       lambda c, d, x: (None if c.dtype == "float32"
                                                        else run_flash_style(flash_attn, c, d, x))))
    return backends


def _flash_api_backend(kind: str, dev: str, version: Optional[str] = None) -> Implementation:
    which = "npu" if kind == "npu" else "npu-emulated"
    api = FlashAttnAPI(which)
    where = dev if which == "npu" else "cpu"
    version = version or DEFAULT_VERSION
    unpad = make_unpad_input(legacy_unpad(version))
    return Implementation(f"flash-api ({which})",
                          f"flash-api {version} → {which} ({device_label(where)})",
                          where, lambda c, d, x: run_flash_style(api, c, d, x, unpad),
                          emulated=which != "npu",
                          optional_dtypes=("float32",) if which == "npu" else ())
