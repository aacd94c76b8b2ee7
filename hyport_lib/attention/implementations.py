"""The attention implementations under comparison, and which of them this host has.

- ``eager``: plain PyTorch attention in the case's dtype, the ``out_pt`` of flash-attn's
  rule (scale folded into q first, softmax in the dtype, fully masked rows set to 0,
  as flash-attn's ``attention_ref(upcast=False, reorder_ops=True)``).
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with a bool mask.
- ``npu-emulated``: hyport's CPU emulation of ``npu_fusion_attention``, called in the
  case's NPU layout with the NPU mask convention and sparse mode (the mapping a port
  writes by hand, :mod:`hyport_lib.attention.nfa_calls`); ``npu``: the same call to the
  real ``torch_npu`` on an NPU.
- ``flash-api (<backend>)``: hyport's flash-attn drop-in (``FlashAttnAPI``), for the
  cases flash-attn can express (no bidirectional spans).
- ``flash_attn``: the real flash-attn package on a CUDA GPU, when installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from hyport_lib.attention.case_data import CaseData
from hyport_lib.attention.cases import AttentionCase
from hyport_lib.attention.nfa_calls import run_nfa
from hyport_lib.backend import get_backend, npu_fusion_attention_op
from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.npu_attention.shim import DEFAULT_VERSION, make_unpad_input
from hyport_lib.port.generated.flash_attn_ascend import pad_input, repeat_kv, unpad_input
from hyport_lib.utils.imports import is_flash_attn_available
from hyport_lib.utils.versions import legacy_unpad


@dataclass
class Implementation:
    """One attention implementation under comparison (not a device backend: those are
    :mod:`hyport_lib.backend`'s). ``run(case, data, device)`` returns the output in BNSD
    form, or None when the implementation cannot express the case (no row is produced)."""

    name: str
    source: str  # e.g. "npu-emulated (CPU)"
    device: str
    run: Callable
    emulated: bool = False
    #: dtypes the contract leaves optional here: an error on them is a SKIP, not a FAIL
    #: (NFA takes float32 only in newer CANN releases).
    optional_dtypes: tuple = ()


def device_label(device: str) -> str:
    """``cpu`` -> ``CPU``, ``npu:0`` -> ``NPU``: how a device is named in a row's source."""
    kind = str(device).split(":")[0]
    return {"cpu": "CPU", "cuda": "CUDA", "npu": "NPU"}.get(kind, kind.upper())


def eager_attention(q, k, v, keep, scale):
    """Plain PyTorch attention in the inputs' dtype: flash-attn's ``out_pt``."""
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
    """Run ``case`` through flash-attn's two functions (``api.flash_attn_func`` /
    ``api.flash_attn_varlen_func``); padded batches go through unpad -> varlen -> pad, as
    code written for the served flash-attn version calls them (``unpad`` returns 4 values
    before 2.7, 5 from 2.7 on)."""
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


def available_implementations(device: str = "auto",
                              flash_attn_version: Optional[str] = None) -> list[Implementation]:
    """Implementations usable on this host. ``device`` picks where eager / sdpa run;
    ``flash_attn_version`` is the flash-attn API the drop-in serves (label and
    ``unpad_input``'s arity)."""
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
    """hyport's flash-attn drop-in, serving ``version``'s API (None: the shim's default)."""
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
