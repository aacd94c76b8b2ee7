"""Numerics comparison of every attention backend on this host against float64.

A grid of :class:`AttentionCase` (layout, dtype, mask kind, GQA, dense / padded /
packed batches, Sq != Skv, odd lengths, head dims 64 and 128) is run through each
available backend and compared with :func:`~hyport_lib.attention.reference.attention_reference`
computed in float64 from the very same low-precision inputs.

Backends (only those usable here are run):

- ``eager``: plain PyTorch attention in the case's dtype, the ``out_pt`` of flash-attn's
  rule (scale folded into q first, softmax in the dtype, fully masked rows set to 0,
  as flash-attn's ``attention_ref(upcast=False, reorder_ops=True)``).
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with a bool mask.
- ``npu-emulated``: hyport's CPU emulation of ``npu_fusion_attention``, called in the
  case's NPU layout with the NPU mask convention and sparse mode (the mapping a port
  writes by hand); ``npu``: the same call to the real ``torch_npu`` on an NPU.
- ``flash-api (<backend>)``: hyport's flash-attn drop-in (``FlashAttnAPI``), for the
  cases flash-attn can express (no bidirectional spans).
- ``flash_attn``: the real flash-attn package on a CUDA GPU, when installed.

Verdict per row, in order (the column ``rule`` says which decided):

1. non-finite values on rows that attend something -> FAIL;
2. flash-attn's rule: ``max|out - ref| <= 2 * max|out_eager - ref| + atol`` where
   ``atol = 2 * max|(ref + 0.3 - 0.3) - ref|`` in the case dtype (its rounding noise,
   as in flash-attn's own tests) -> FAIL when broken;
3. cosine similarity > 0.99 (msprobe) -> FAIL when not;
4. rows that attend nothing must be 0 (flash-attn's rule, hyport's emulation) -> WARN.

Relative errors divide by ``max(|ref|, 1e-6)``; near-zero reference values make the
max relative error large, which is why it is reported and not used to decide.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

import torch

from hyport_lib.attention import reference as R

STAGE = "02_attention"
DTYPES = ("float16", "bfloat16", "float32")
MASK_KINDS = ("causal", "bidirectional", "band", "spans")
BATCH_KINDS = ("dense", "padded", "packed")
NFA_UNBOUNDED = 2147483647
REL_FLOOR = 1e-6
COSINE_MIN = 0.99
METRIC_COLUMNS = ("max_abs", "rmse", "max_rel", "rel_gt_1e-3", "rel_gt_5e-3", "cosine")


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionCase:
    """One comparison case.

    Attributes:
        layout: NPU input layout the npu backends are called with (BSH, SBH, BSND,
            BNSD, TND). ``packed`` batches are always TND.
        dtype: ``float16``, ``bfloat16`` or ``float32``.
        mask: ``causal`` (bottom-right when Sq != Skv, flash-attn >= 2.1), ``bidirectional``,
            ``band`` (``window``) or ``spans`` (causal + bidirectional ``spans``).
        batch: ``dense`` (every sample ``lengths_q[0] x lengths_kv[0]``), ``padded``
            (right-padded to the longest) or ``packed`` (TND, no padding).
        lengths_q / lengths_kv: per-sample lengths.
        window: flash-attn ``window_size`` (left, right) of a ``band`` case.
        spans: per-sample half-open ``(start, end)`` bidirectional spans (``spans``).
        npu_sparse_mode: force the NPU mapping's sparse mode (2 for a top-left causal,
            0 for a full band mask with pre/next); None derives it from the mask.
    """

    layout: str
    dtype: str
    mask: str
    batch: str
    lengths_q: tuple
    lengths_kv: tuple
    nq: int
    nkv: int
    head_dim: int
    window: tuple = (-1, -1)
    spans: tuple = ()
    npu_sparse_mode: Optional[int] = None

    def __post_init__(self):
        if self.layout not in R.LAYOUTS:
            raise ValueError(f"layout={self.layout!r}: expected one of {R.LAYOUTS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {DTYPES}")
        if self.mask not in MASK_KINDS:
            raise ValueError(f"mask={self.mask!r}: expected one of {MASK_KINDS}")
        if self.batch not in BATCH_KINDS:
            raise ValueError(f"batch={self.batch!r}: expected one of {BATCH_KINDS}")
        if (self.batch == "packed") != (self.layout == "TND"):
            raise ValueError(f"layout={self.layout}, batch={self.batch}: TND is packed-only")
        if len(self.lengths_q) != len(self.lengths_kv):
            raise ValueError("lengths_q and lengths_kv must have one entry per sample")
        if self.batch == "dense" and (len(set(self.lengths_q)) > 1 or len(set(self.lengths_kv)) > 1):
            raise ValueError("dense cases have equal lengths in every sample")
        if self.nkv <= 0 or self.nq % self.nkv:
            raise ValueError(f"nq={self.nq} must be a multiple of nkv={self.nkv}")
        if self.mask == "spans" and len(self.spans) != len(self.lengths_q):
            raise ValueError("spans: one tuple of spans per sample")
        if self.mask == "spans" and self.lengths_q != self.lengths_kv:
            raise ValueError("spans cases are self-attention (lengths_q == lengths_kv)")

    @property
    def name(self) -> str:
        lq = "/".join(map(str, self.lengths_q))
        lk = "/".join(map(str, self.lengths_kv))
        shape = lq if lq == lk else f"{lq}x{lk}"
        extra = f" w{self.window[0]},{self.window[1]}" if self.mask == "band" else ""
        return (f"{self.layout} {self.batch} {self.mask}{extra} S={shape} "
                f"N={self.nq}/{self.nkv} D={self.head_dim} {self.dtype}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def sq(self) -> int:
        return max(self.lengths_q)

    @property
    def skv(self) -> int:
        return max(self.lengths_kv)

    @property
    def flash_expressible(self) -> bool:
        """flash-attn's API has no bidirectional spans."""
        return self.mask != "spans"

    def describe(self) -> dict:
        return {"case": self.name, "layout": self.layout, "dtype": self.dtype,
                "mask": self.mask, "batch": self.batch, "sq": self.sq, "skv": self.skv,
                "nq": self.nq, "nkv": self.nkv, "head_dim": self.head_dim}


def _base_cases(full: bool) -> list[dict]:
    """Case shapes without dtype. The default list touches every dimension once or more."""
    cases = [
        # dense, every NPU layout
        dict(layout="BSND", mask="causal", batch="dense", lengths_q=(16,) * 2, lengths_kv=(16,) * 2,
             nq=4, nkv=4, head_dim=64, npu_sparse_mode=2),
        dict(layout="BNSD", mask="causal", batch="dense", lengths_q=(5,), lengths_kv=(17,),
             nq=4, nkv=2, head_dim=64),
        dict(layout="BSH", mask="bidirectional", batch="dense", lengths_q=(1,) * 2,
             lengths_kv=(1,) * 2, nq=2, nkv=1, head_dim=128),
        dict(layout="SBH", mask="band", batch="dense", lengths_q=(13,), lengths_kv=(13,),
             nq=4, nkv=2, head_dim=64, window=(3, 0), npu_sparse_mode=0),
        dict(layout="BSND", mask="band", batch="dense", lengths_q=(7,), lengths_kv=(19,),
             nq=2, nkv=2, head_dim=64, window=(4, 2)),
        dict(layout="BSND", mask="spans", batch="dense", lengths_q=(12,), lengths_kv=(12,),
             nq=2, nkv=2, head_dim=128, spans=(((2, 7),),)),
        dict(layout="BSND", mask="causal", batch="dense", lengths_q=(1,), lengths_kv=(33,),
             nq=8, nkv=2, head_dim=128),
        # padded
        dict(layout="BNSD", mask="causal", batch="padded", lengths_q=(7, 3), lengths_kv=(7, 3),
             nq=4, nkv=1, head_dim=64),
        dict(layout="BSND", mask="bidirectional", batch="padded", lengths_q=(1, 9),
             lengths_kv=(1, 9), nq=2, nkv=2, head_dim=128),
        dict(layout="BSH", mask="spans", batch="padded", lengths_q=(9, 5), lengths_kv=(9, 5),
             nq=2, nkv=1, head_dim=64, spans=(((1, 4),), ((0, 3),))),
        # packed (TND)
        dict(layout="TND", mask="causal", batch="packed", lengths_q=(5, 1, 9),
             lengths_kv=(5, 1, 9), nq=4, nkv=2, head_dim=64),
        dict(layout="TND", mask="bidirectional", batch="packed", lengths_q=(3, 8),
             lengths_kv=(3, 8), nq=2, nkv=2, head_dim=128),
        dict(layout="TND", mask="band", batch="packed", lengths_q=(6, 11), lengths_kv=(6, 11),
             nq=4, nkv=4, head_dim=64, window=(2, 0)),
        dict(layout="TND", mask="spans", batch="packed", lengths_q=(10, 6), lengths_kv=(10, 6),
             nq=4, nkv=2, head_dim=64, spans=(((2, 6),), ((1, 4),))),
        dict(layout="TND", mask="causal", batch="packed", lengths_q=(1, 3), lengths_kv=(7, 5),
             nq=2, nkv=1, head_dim=128),
    ]
    if not full:
        return cases
    # full: a cartesian grid on top of the curated list.
    shapes = [((1,), (1,)), ((17,), (17,)), ((31,), (65,)), ((128,), (128,))]
    heads = [(4, 4), (8, 2)]
    for layout, mask, (lq, lk), (nq, nkv), d in itertools.product(
            ("BSH", "SBH", "BSND", "BNSD"), ("causal", "bidirectional", "band"), shapes,
            heads, (64, 128)):
        cases.append(dict(layout=layout, mask=mask, batch="dense", lengths_q=lq * 2,
                          lengths_kv=lk * 2, nq=nq, nkv=nkv, head_dim=d,
                          window=(8, 0) if mask == "band" else (-1, -1)))
    for mask, lens, (nq, nkv), d in itertools.product(
            ("causal", "bidirectional", "band", "spans"), ((1, 17, 64), (33, 2, 100, 7)),
            heads, (64, 128)):
        spans = tuple(((n // 3, n // 3 + max(n // 2, 1)),) for n in lens) if mask == "spans" else ()
        cases.append(dict(layout="TND", mask=mask, batch="packed", lengths_q=lens,
                          lengths_kv=lens, nq=nq, nkv=nkv, head_dim=d, spans=spans,
                          window=(16, 0) if mask == "band" else (-1, -1)))
        cases.append(dict(layout="BNSD", mask=mask, batch="padded", lengths_q=lens,
                          lengths_kv=lens, nq=nq, nkv=nkv, head_dim=d, spans=spans,
                          window=(16, 0) if mask == "band" else (-1, -1)))
    return cases


def build_grid(full: bool = False, dtypes: Sequence[str] = DTYPES) -> list[AttentionCase]:
    """The comparison grid: every base case in every requested dtype.

    ``dtypes`` may also be one comma-separated string (``"float16,float32"``), as a
    command-line override gives it.
    """
    if isinstance(dtypes, str):
        dtypes = [d for d in dtypes.split(",") if d.strip()]
    dtypes = [str(d).strip().replace("torch.", "") for d in dtypes]
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtypes: {d!r} is not one of {', '.join(DTYPES)}")
    return [AttentionCase(dtype=d, **base) for base in _base_cases(full) for d in dtypes]


# --------------------------------------------------------------------------------------
# Case data: canonical tensors + keep mask
# --------------------------------------------------------------------------------------
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
    out, offset = [], 0
    for n, spans in zip(case.lengths_q, case.spans):
        out += [(offset + s, offset + e) for s, e in spans]
        offset += n
    return out


def case_keep_mask(case: AttentionCase) -> torch.Tensor:
    """The case's keep mask (True = attend) for the canonical tensors."""
    causal = case.mask in ("causal", "spans")
    window = case.window if case.mask == "band" else (-1, -1)
    if case.batch == "packed":
        keep = R.block_diagonal_mask(case.lengths_q, case.lengths_kv, causal=causal,
                                     window_size=window)
        if case.mask == "spans":
            keep = R.bidirectional_span_mask(0, _global_spans(case), base=keep)
        return keep.view(1, 1, *keep.shape)
    keep = R.padded_mask(case.lengths_q, case.lengths_kv, case.sq, case.skv, causal=causal,
                         window_size=window)
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
    valid = ~res.empty_rows
    return CaseData(q, k, v, keep, res.out, res.empty_rows, valid)


# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------
@dataclass
class Backend:
    """One attention implementation under test.

    ``run(case, data, device)`` returns the output in canonical BNSD form; it returns
    None when the backend cannot express the case (no row is produced).
    """

    name: str
    source: str  # e.g. "npu-emulated (CPU)"
    device: str
    run: Callable
    emulated: bool = False
    #: dtypes the contract leaves optional here: an error on them is a SKIP, not a FAIL
    #: (NFA takes float32 only in newer CANN releases).
    optional_dtypes: tuple = ()


def eager_attention(q, k, v, keep, scale):
    """Plain PyTorch attention in the inputs' dtype: flash-attn's ``out_pt``."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = torch.matmul(q * scale, k.transpose(-1, -2))
    keep = keep.expand_as(scores)
    scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = probs.masked_fill(~keep.any(-1, keepdim=True), 0.0)  # no NaN for empty rows
    return torch.matmul(probs.to(v.dtype), v)


def _run_eager(case, data, device):
    dev = torch.device(device)
    return eager_attention(data.q.to(dev), data.k.to(dev), data.v.to(dev),
                           data.keep.to(dev), case.scale)


def _run_sdpa(case, data, device):
    import torch.nn.functional as F

    dev = torch.device(device)
    q, k, v = data.q.to(dev), data.k.to(dev), data.v.to(dev)
    groups = case.nq // case.nkv
    if groups > 1:  # enable_gqa needs torch >= 2.5; repeating works everywhere
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=data.keep.to(dev), scale=case.scale)


def nfa_mapping(case: AttentionCase, data: CaseData, device, compressed: torch.Tensor) -> list[dict]:
    """The ``npu_fusion_attention`` calls that compute ``case`` (what a port writes).

    Returns a list of calls, each a dict with the tensors in the NPU layout plus
    keyword arguments, and ``rows``: None (the output is the answer) or, for the
    write-back of bidirectional spans in packed batches, the global token rows it
    overwrites.
    """
    dev = torch.device(device)
    q, k, v = data.q.to(dev), data.k.to(dev), data.v.to(dev)
    base = dict(head_num=case.nq, input_layout=case.layout, scale=case.scale)
    if case.batch == "packed":
        qt, kt, vt = (R.from_bnsd(x, "TND") for x in (q, k, v))
        lengths = dict(actual_seq_qlen=R.cumulative_lengths(case.lengths_q),
                       actual_seq_kvlen=R.cumulative_lengths(case.lengths_kv))
        call = dict(query=qt, key=kt, value=vt, **base, **lengths)
        if case.mask in ("causal", "spans"):
            call.update(atten_mask=compressed, sparse_mode=3)
        elif case.mask == "band":
            left, right = case.window
            call.update(atten_mask=compressed, sparse_mode=4,
                        pre_tockens=NFA_UNBOUNDED if left < 0 else left,
                        next_tockens=NFA_UNBOUNDED if right < 0 else right)
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
    elif case.mask == "causal":
        args.update(atten_mask=compressed, sparse_mode=3 if mode is None else mode)
    elif case.mask == "band":
        left, right = case.window
        pre = NFA_UNBOUNDED if left < 0 else left
        nxt = NFA_UNBOUNDED if right < 0 else right
        if mode == 0:  # full mask + band from the top-left (equal when Sq == Skv)
            keep = R.window_mask(case.sq, case.skv, case.window, device=dev)
            args.update(atten_mask=R.to_npu_mask(keep), sparse_mode=0, pre_tockens=pre,
                        next_tockens=nxt)
        else:
            args.update(atten_mask=compressed, sparse_mode=4, pre_tockens=pre, next_tockens=nxt)
    return [args]


def _span_writeback(case, qt, kt, vt, base) -> dict:
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
    from hyport_lib.attention.emulation import compressed_causal_mask

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


def run_flash_style(api, case: AttentionCase, data: CaseData, device) -> Optional[torch.Tensor]:
    """Run ``case`` through flash-attn's two functions (``api.flash_attn_func`` /
    ``api.flash_attn_varlen_func``); padded batches go through unpad -> varlen -> pad."""
    if not case.flash_expressible:
        return None
    dev = torch.device(device)
    causal = case.mask == "causal"
    window = tuple(case.window) if case.mask == "band" else (-1, -1)
    if case.batch == "dense":
        q, k, v = (R.from_bnsd(x.to(dev), "BSND") for x in (data.q, data.k, data.v))
        out = api.flash_attn_func(q, k, v, softmax_scale=case.scale, causal=causal,
                                  window_size=window)
        return R.to_bnsd(_first(out), "BSND")
    if case.batch == "packed":
        qt, kt, vt = (R.from_bnsd(x.to(dev), "TND") for x in (data.q, data.k, data.v))
    else:  # unpad: keep the real tokens of each sample, in order
        qt = _unpad(data.q.to(dev), case.lengths_q)
        kt = _unpad(data.k.to(dev), case.lengths_kv)
        vt = _unpad(data.v.to(dev), case.lengths_kv)
    cu_q = torch.tensor(R.cumulative_lengths(case.lengths_q, True), dtype=torch.int32, device=dev)
    cu_k = torch.tensor(R.cumulative_lengths(case.lengths_kv, True), dtype=torch.int32, device=dev)
    out = _first(api.flash_attn_varlen_func(qt, kt, vt, cu_q, cu_k, case.sq, case.skv,
                                            softmax_scale=case.scale, causal=causal,
                                            window_size=window))
    if case.batch == "packed":
        return R.to_bnsd(out, "TND")
    return _pad(out, case.lengths_q, case.sq)


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _unpad(x, lengths):
    """[B, N, S, D] -> [T, N, D] of the first ``lengths[b]`` tokens of each sample."""
    return torch.cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)], dim=0)


def _pad(x, lengths, s):
    """[T, N, D] -> [B, N, S, D] with zeros in the padding."""
    out = x.new_zeros(len(lengths), x.shape[1], s, x.shape[2])
    t = 0
    for b, n in enumerate(lengths):
        out[b, :, :n] = x[t:t + n].transpose(0, 1)
        t += n
    return out


def _label(kind: str) -> str:
    return {"cpu": "CPU", "cuda": "CUDA", "npu": "NPU"}.get(kind, kind.upper())


def available_backends(device: str = "auto") -> list[Backend]:
    """Backends usable on this host. ``device`` picks where eager / sdpa run."""
    from hyport_lib.backend import get_backend
    from hyport_lib.utils.imports import is_flash_attn_available, try_import

    host = get_backend(device)
    kind, dev = host.kind, host.device(0)
    backends = [
        Backend("eager", f"eager ({_label(kind)})", dev, _run_eager),
        Backend("sdpa", f"sdpa ({_label(kind)})", dev, _run_sdpa),
    ]
    from hyport_lib.attention.emulation import npu_fusion_attention as emulated

    backends.append(Backend("npu-emulated", "npu-emulated (CPU)", "cpu",
                            lambda c, d, x: run_nfa(emulated, c, d, x), emulated=True))
    if kind == "npu":
        torch_npu, _ = try_import("torch_npu")
        backends.append(Backend("npu", "npu (NPU)", dev,
                                lambda c, d, x: run_nfa(torch_npu.npu_fusion_attention, c, d, x),
                                optional_dtypes=("float32",)))
    flash_api = _flash_api_backend(kind, dev)
    if flash_api is not None:
        backends.append(flash_api)
    if kind == "cuda" and is_flash_attn_available():
        import flash_attn

        backends.append(Backend("flash_attn", "flash_attn (CUDA)", dev,
                                lambda c, d, x: (None if c.dtype == "float32"
                                                 else run_flash_style(flash_attn, c, d, x))))
    return backends


def _flash_api_backend(kind: str, dev: str) -> Optional[Backend]:
    """hyport's flash-attn drop-in, when its module is present (imported lazily)."""
    try:
        from hyport_lib.attention.flash_api import FlashAttnAPI
    except ImportError:
        return None
    which = "npu" if kind == "npu" else "npu-emulated"
    api = FlashAttnAPI(which)
    where = dev if which == "npu" else "cpu"
    label = "NPU" if which == "npu" else "CPU"
    return Backend(f"flash-api ({which})", f"flash-api → {which} ({label})", where,
                   lambda c, d, x: run_flash_style(api, c, d, x), emulated=which != "npu",
                   optional_dtypes=("float32",) if which == "npu" else ())


# --------------------------------------------------------------------------------------
# Metrics and verdicts
# --------------------------------------------------------------------------------------
@dataclass
class Metrics:
    max_abs: float
    eager_max_abs: float
    atol: float
    bound: float
    cosine: float
    max_rel: float
    rel_gt_1e3: float
    rel_gt_5e3: float
    rmse: float
    finite: bool
    empty_rows: int
    empty_rows_out: str  # "0", "NaN" or "nonzero" (what the backend left there), "-" if none


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def compute_metrics(out: torch.Tensor, data: CaseData, eager_out: torch.Tensor,
                    dtype: torch.dtype) -> Metrics:
    """All metrics of one output against the float64 reference (valid rows only)."""
    out = out.detach().to("cpu", torch.float64)
    eager_out = eager_out.detach().to("cpu", torch.float64)
    valid = data.valid_rows.expand(out.shape[:3])
    ref_v, out_v = data.ref[valid], out[valid]
    err = (out_v - ref_v).abs()
    finite = bool(torch.isfinite(out_v).all())
    eager_err = _max((eager_out[valid] - ref_v).abs())
    ref_low = data.ref[valid].to(dtype)
    atol = 2 * _max(((ref_low + 0.3 - 0.3) - ref_low).abs().double())
    rel = err / ref_v.abs().clamp_min(REL_FLOOR)
    a, b = out_v.flatten(), ref_v.flatten()
    denom = float(a.norm() * b.norm())
    cosine = float(a @ b) / denom if denom > 0 else (1.0 if float(a.norm()) == 0 else 0.0)
    n = max(err.numel(), 1)
    empty = data.empty_rows.expand(out.shape[:3])
    empty_vals = out[empty]
    if not empty_vals.numel():
        empty_out = "-"
    elif torch.isnan(empty_vals).any():
        empty_out = "NaN"
    else:
        empty_out = "0" if bool((empty_vals == 0).all()) else "nonzero"
    return Metrics(
        max_abs=_max(err) if finite else float("inf"), eager_max_abs=eager_err, atol=atol,
        bound=2 * eager_err + atol, cosine=cosine if finite else float("nan"),
        max_rel=_max(rel) if finite else float("inf"),
        rel_gt_1e3=float((rel > 1e-3).sum()) / n, rel_gt_5e3=float((rel > 5e-3).sum()) / n,
        rmse=float(err.pow(2).mean().sqrt()) if err.numel() else 0.0, finite=finite,
        empty_rows=int(data.empty_rows.sum()), empty_rows_out=empty_out)


def decide(m: Metrics, baseline: bool = False) -> tuple[str, str]:
    """(verdict, the rule that decided), in the order of the module docstring."""
    if not m.finite:
        return "FAIL", "non-finite output on rows that attend keys"
    if m.max_abs > m.bound:
        return "FAIL", (f"flash-attn rule: max err {m.max_abs:.2e} > 2×eager "
                        f"{m.eager_max_abs:.2e} + atol {m.atol:.1e}")
    if not m.cosine > COSINE_MIN:
        return "FAIL", f"cosine {m.cosine:.5f} ≤ {COSINE_MIN}"
    if m.empty_rows_out not in ("-", "0"):
        return "WARN", f"fully masked rows give {m.empty_rows_out} (flash-attn gives 0)"
    if baseline:
        return "PASS", "baseline (out_pt of flash-attn's rule)"
    return "PASS", (f"flash-attn rule: {m.max_abs:.2e} ≤ 2×{m.eager_max_abs:.2e} "
                    f"+ {m.atol:.1e}; cosine > {COSINE_MIN}")


# --------------------------------------------------------------------------------------
# Running the grid
# --------------------------------------------------------------------------------------
@dataclass
class ComparisonResult:
    """Rows of one grid run plus where the figures came from."""

    rows: list[dict]
    backends: list[dict]
    device: str
    emulated: bool  # True when no real NPU took part: NPU figures come from the emulation
    seconds: float
    cases: int
    full: bool = False
    notes: list[str] = field(default_factory=list)

    def frame(self):
        """One row per (case, backend); metric columns named as in :data:`METRIC_COLUMNS`."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["verdict"]] = out.get(r["verdict"], 0) + 1
        return out

    @property
    def verdict(self) -> str:
        counts = self.counts
        if counts.get("FAIL"):
            return "FAIL"
        if counts.get("WARN"):
            return "WARN"
        return "PASS" if counts.get("PASS") else "SKIP"

    def to_dict(self) -> dict:
        return asdict(self)


def compare_case(case: AttentionCase, backends: Sequence[Backend], seed: int = 0) -> list[dict]:
    """Rows of one case, one per backend that can express it."""
    data = make_case_data(case, seed)
    eager_out = eager_attention(data.q, data.k, data.v, data.keep, case.scale)
    rows = []
    for be in backends:
        row = {**case.describe(), "backend": be.name, "source": be.source}
        started = time.perf_counter()
        try:
            out = be.run(case, data, be.device)
        except Exception as exc:  # a backend that raises on a valid case fails that case
            message = (str(exc).splitlines() or [""])[0][:160]
            optional = case.dtype in be.optional_dtypes
            row.update({c: None for c in METRIC_COLUMNS}, verdict="SKIP" if optional else "FAIL",
                       rule=(f"{case.dtype} not supported here: " if optional else "error: ")
                       + f"{type(exc).__name__}: {message}",
                       empty_rows=int(data.empty_rows.sum()), empty_rows_out="-", ms=None)
            rows.append(row)
            continue
        if out is None:
            continue
        ms = (time.perf_counter() - started) * 1e3
        m = compute_metrics(out, data, eager_out, case.torch_dtype)
        verdict, rule = decide(m, baseline=be.name == "eager")
        row.update({
            "max_abs": m.max_abs, "eager_max_abs": m.eager_max_abs, "bound": m.bound,
            "rmse": m.rmse, "max_rel": m.max_rel, "rel_gt_1e-3": m.rel_gt_1e3,
            "rel_gt_5e-3": m.rel_gt_5e3, "cosine": m.cosine, "empty_rows": m.empty_rows,
            "empty_rows_out": m.empty_rows_out, "verdict": verdict, "rule": rule, "ms": ms,
        })
        rows.append(row)
    return rows


def run_comparison(cases: Optional[Sequence[AttentionCase]] = None, device: str = "auto",
                   seed: int = 0, full: bool = False, dtypes: Sequence[str] = DTYPES,
                   backends: Optional[Sequence[Backend]] = None,
                   progress: Optional[Callable[[int, int], None]] = None) -> ComparisonResult:
    """Run the grid (``cases`` or :func:`build_grid` ``(full, dtypes)``) on every backend.

    Args:
        device: where eager and sdpa run (``auto``, ``cpu``, ``cuda``, ``npu``); the
            emulation always runs on the CPU.
        seed: seeds each case's inputs (case ``i`` uses ``seed + i``).
        progress: called as ``progress(done, total)`` after each case.
    """
    from hyport_lib.backend import get_backend

    cases = list(cases) if cases is not None else build_grid(full, dtypes)
    backends = list(backends) if backends is not None else available_backends(device)
    started = time.perf_counter()
    rows: list[dict] = []
    for i, case in enumerate(cases):
        rows += compare_case(case, backends, seed + i)
        if progress is not None:
            progress(i + 1, len(cases))
    kind = get_backend(device).kind
    real_npu = any(b.name == "npu" for b in backends)
    notes = []
    if not real_npu:
        notes.append("No NPU here: NPU figures come from hyport's CPU emulation of "
                     "npu_fusion_attention (the documented contract), not from an NPU.")
    return ComparisonResult(
        rows=rows, backends=[{"name": b.name, "source": b.source, "device": b.device,
                              "emulated": b.emulated} for b in backends],
        device=kind, emulated=not real_npu, seconds=time.perf_counter() - started,
        cases=len(cases), full=full, notes=notes)


def provenance(result: ComparisonResult):
    """The :class:`~hyport_lib.results.Provenance` of a comparison's NPU figures."""
    from hyport_lib.results import Provenance

    return Provenance(device="npu" if not result.emulated else "cpu", emulated=result.emulated)


# --------------------------------------------------------------------------------------
# Model level: the tiny model with eager vs swapped attention
# --------------------------------------------------------------------------------------
@dataclass
class ModelComparison:
    """Eager vs swapped attention on one model (logits and greedy generation)."""

    model_path: str
    attn_implementation: str
    backend: str
    dtype: str
    device: str
    max_abs_logits: Optional[float] = None
    top1_agreement: Optional[float] = None
    kl_divergence: Optional[float] = None  # mean KL(eager || swapped) over real tokens
    greedy_identical: Optional[bool] = None
    new_tokens: int = 0
    positions: int = 0
    verdict: str = "SKIP"
    detail: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def frame(self):
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in self.to_dict().items()}])


#: max |Δ logits| allowed per dtype before the model check warns (fp32 is exact math).
LOGIT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}


def _model_inputs(processor, device):
    from hyport_lib.models.sample_image import sample_image

    tok = getattr(processor, "tokenizer", processor)
    tok.padding_side = "left"  # a left-padded batch: padding rows are fully masked
    texts = ["How do I open a fridge?", "Hi"]
    call = {"text": texts, "padding": True, "return_tensors": "pt"}
    image_token = getattr(processor, "image_token", None)
    if image_token and hasattr(processor, "image_processor"):
        # One image + text sample next to a text-only one, as the reference batch does.
        call["text"] = [f"{image_token}\n{texts[0]}", texts[1]]
        call["images"] = [sample_image()]
    inputs = processor(**call)
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}


@contextlib.contextmanager
def _quiet_loading():
    """No "Loading weights" progress bars in notebook output (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def compare_model(model_path: str = "tiny", backend: str = "npu-emulated",
                  dtype: str = "float32", device: str = "cpu", max_new_tokens: int = 8,
                  seed: int = 0) -> ModelComparison:
    """Load ``model_path`` twice (eager, and hyport's swapped attention) and compare.

    Args:
        backend: the swapped attention's backend (``npu-emulated`` on a host without an
            NPU, ``npu`` on one), passed to ``register_hyport_attention``.
        dtype: model dtype; ``device``: where both models run.
    """
    result = ModelComparison(model_path=model_path, attn_implementation="", backend=backend,
                             dtype=dtype, device=device,
                             source=f"{backend} ({_label(str(device).split(':')[0])})")
    try:
        from hyport_lib.attention.hf_integration import register_hyport_attention
    except ImportError as exc:
        result.detail = f"hyport_lib.attention.hf_integration is not available ({exc})"
        return result
    from hyport_lib.inference.generate import InferenceConfig, load_model

    name = register_hyport_attention(backend=backend)
    result.attn_implementation = name
    torch.manual_seed(seed)
    with _quiet_loading():
        eager, processor = load_model(InferenceConfig(model_path=model_path, device=device,
                                                      dtype=dtype, attn_implementation="eager"))
        swapped, _ = load_model(InferenceConfig(model_path=model_path, device=device,
                                                dtype=dtype, attn_implementation=name))
    active = str(getattr(swapped.config, "_attn_implementation", "") or "")
    inputs = _model_inputs(processor, eager.device)
    with torch.no_grad():
        le = eager(**inputs).logits.double().cpu()
        ls = swapped(**inputs).logits.double().cpu()
        gen = dict(max_new_tokens=max_new_tokens, do_sample=False)
        ge = eager.generate(**inputs, **gen).cpu()
        gs = swapped.generate(**inputs, **gen).cpu()
    real = inputs["attention_mask"].bool().cpu()
    le, ls = le[real], ls[real]
    pe, ps = torch.log_softmax(le, -1), torch.log_softmax(ls, -1)
    result.max_abs_logits = float((le - ls).abs().max())
    result.top1_agreement = float((le.argmax(-1) == ls.argmax(-1)).double().mean())
    result.kl_divergence = float((pe.exp() * (pe - ps)).sum(-1).mean())
    result.greedy_identical = bool(torch.equal(ge, gs))
    result.new_tokens = int(ge.shape[1] - inputs["input_ids"].shape[1])
    result.positions = int(real.sum())
    tol = LOGIT_TOLERANCE.get(dtype, 1e-3)
    if active != name:
        result.verdict, result.detail = "FAIL", (f"swapped model reports attn_implementation="
                                                 f"{active!r}, not {name!r}")
    elif result.top1_agreement < 1.0 or not result.greedy_identical:
        result.verdict = "FAIL"
        result.detail = "top-1 or greedy generation differs between eager and swapped attention"
    elif result.max_abs_logits > tol:
        result.verdict, result.detail = "WARN", f"max |Δ logits| above {tol:g} for {dtype}"
    else:
        result.verdict = "PASS"
        result.detail = f"same top-1 and greedy tokens; max |Δ logits| ≤ {tol:g}"
    return result


# --------------------------------------------------------------------------------------
# Code scan (H3's static scan) and the stage summary
# --------------------------------------------------------------------------------------
PLANTED_EXAMPLE = '''\
"""A model file as it often arrives from a CUDA codebase (planted by hyport)."""
import torch
from flash_attn import flash_attn_func, flash_attn_varlen_func
from flash_attn.bert_padding import pad_input, unpad_input


class Attention(torch.nn.Module):
    def forward(self, q, k, v, cu_seqlens=None, max_seqlen=None):
        if cu_seqlens is not None:
            return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens,
                                          max_seqlen, max_seqlen, causal=True)
        return flash_attn_func(q, k, v, causal=True)


def load(path):
    model = torch.load(path).cuda()
    torch.cuda.synchronize()
    return model.to("cuda")
'''
PLANTED_REQUIREMENTS = "torch\nflash-attn==2.6.3\ntransformers\n"


def planted_example(directory=None):
    """Write the planted example (a model file + requirements) and return its folder."""
    import tempfile
    from pathlib import Path

    # A fixed folder, rewritten on each call: runs do not pile up temporary folders.
    folder = Path(directory) if directory else Path(tempfile.gettempdir()) / "hyport-planted-example"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modeling_example.py").write_text(PLANTED_EXAMPLE, encoding="utf-8")
    (folder / "requirements.txt").write_text(PLANTED_REQUIREMENTS, encoding="utf-8")
    return folder


def run_scan(code_path: str = ""):
    """H3's static scan of ``code_path`` (empty: the planted example).

    Returns:
        ``(report, path)``; ``report`` is None when the scan module is not installed.
    """
    path = str(code_path or "").strip() or str(planted_example())
    try:
        from hyport_lib.scan import scan_path
    except ImportError:
        return None, path
    return scan_path(path), path


def summarize(result: ComparisonResult, model: Optional[ModelComparison] = None) -> dict:
    """Stage verdict, one-line summary and headline figures for ``record_result``."""
    counts = result.counts
    frame_rows = [r for r in result.rows if r.get("max_abs") is not None]
    npu_rows = [r for r in frame_rows if r["backend"] in ("npu", "npu-emulated")]
    primary = "npu" if any(r["backend"] == "npu" for r in npu_rows) else "npu-emulated"
    worst = max((r["max_abs"] / r["bound"] for r in npu_rows
                 if r["backend"] == primary and r["bound"]), default=None)
    verdict = result.verdict
    if model is not None and model.verdict == "FAIL":
        verdict = "FAIL"
    elif model is not None and model.verdict == "WARN" and verdict == "PASS":
        verdict = "WARN"
    headline = {
        "cases": result.cases,
        "rows PASS/WARN/FAIL": f"{counts.get('PASS', 0)}/{counts.get('WARN', 0)}/{counts.get('FAIL', 0)}",
        f"worst {primary} err/bound": None if worst is None else round(worst, 3),
    }
    if model is not None and model.max_abs_logits is not None:
        headline["model max |Δ logits|"] = float(f"{model.max_abs_logits:.3g}")
        headline["greedy identical"] = model.greedy_identical
    where = "NPU" if not result.emulated else "npu-emulated on CPU"
    summary = (f"{result.cases} cases × {len(result.backends)} backends vs float64 "
               f"({where}): {counts.get('FAIL', 0)} FAIL, {counts.get('WARN', 0)} WARN")
    if model is not None:
        summary += f"; model {model.verdict}"
    return {"verdict": verdict, "summary": summary, "headline": headline}


def swapped_backend(kind: str) -> tuple[str, str]:
    """(attention backend, torch device) of the model-level check on a host of ``kind``."""
    return ("npu", "npu:0") if kind == "npu" else ("npu-emulated", "cpu")


def record_stage(result: ComparisonResult, model: Optional[ModelComparison] = None,
                 scan=None, scanned_path: str = "") -> dict:
    """Record the stage result (``record_result``) and return the summary dict."""
    from hyport_lib.results import record_result

    summary = summarize(result, model)
    if scan is not None:
        summary["headline"]["scan findings"] = len(scan.hits)
    data = {"rows": result.rows, "backends": result.backends, "notes": result.notes,
            "seconds": result.seconds, "full": result.full,
            "model": model.to_dict() if model is not None else None,
            "scan": ({"path": scanned_path, **scan.to_dict()} if scan is not None else None)}
    record_result(STAGE, summary["verdict"], summary=summary["summary"],
                  headline=summary["headline"], data=data, provenance=provenance(result))
    return summary
