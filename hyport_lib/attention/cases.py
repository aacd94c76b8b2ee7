"""The cases of stage 02's grid. An :class:`AttentionCase` only describes a case;
:func:`make_case_data` draws its tensors, in canonical BNSD form (a packed batch is
``[1, N, T, D]``), which each implementation converts to its own layout.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from hyport_lib.attention.params import DTYPES
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.reference import LAYOUTS

MASK_KINDS = ("causal", "bidirectional", "band", "spans")
BATCH_KINDS = ("dense", "padded", "packed")


@dataclass(frozen=True)
class AttentionCase:
    """``mask``: ``causal`` (bottom-right when Sq != Skv, flash-attn >= 2.1),
    ``bidirectional``, ``band`` (``window``) or ``spans`` (causal + bidirectional ``spans``);
    ``batch``: ``dense`` (every sample ``lengths_q[0] x lengths_kv[0]``), ``padded``
    (right-padded to the longest) or ``packed`` (TND, no padding)."""

    layout: str  # the NPU input layout the npu backends are called with
    dtype: str
    mask: str
    batch: str
    lengths_q: tuple  # per sample
    lengths_kv: tuple
    nq: int
    nkv: int
    head_dim: int
    window: tuple = (-1, -1)  # flash-attn's window_size (left, right) of a band case
    spans: tuple = ()  # per sample, half-open (start, end) bidirectional spans
    #: forces the NPU mapping's sparse mode (2: a top-left causal, 0: a full band mask
    #: with pre/next); None derives it from the mask
    npu_sparse_mode: Optional[int] = None

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout={self.layout!r}: expected one of {LAYOUTS}")
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
    def causal(self) -> bool:
        return self.mask in ("causal", "spans")  # spans are causal outside their spans

    @property
    def window_size(self) -> tuple:
        return tuple(self.window) if self.mask == "band" else (-1, -1)

    @property
    def flash_expressible(self) -> bool:
        return self.mask != "spans"  # flash-attn's API has no bidirectional spans

    def describe(self) -> dict:
        return {"case": self.name, "layout": self.layout, "dtype": self.dtype,
                "mask": self.mask, "batch": self.batch, "sq": self.sq, "skv": self.skv,
                "nq": self.nq, "nkv": self.nkv, "head_dim": self.head_dim}


def _base_cases(full: bool) -> list[dict]:
    """Case shapes without dtype; the default list touches every dimension once or more."""
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
    return cases + _full_grid() if full else cases


def _full_grid() -> list[dict]:
    """A cartesian product on top of the curated list."""
    cases = []
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
        for layout, batch in (("TND", "packed"), ("BNSD", "padded")):
            cases.append(dict(layout=layout, mask=mask, batch=batch, lengths_q=lens,
                              lengths_kv=lens, nq=nq, nkv=nkv, head_dim=d, spans=spans,
                              window=(16, 0) if mask == "band" else (-1, -1)))
    return cases


def build_grid(full: bool = False, dtypes: Sequence[str] = DTYPES) -> list[AttentionCase]:
    return [AttentionCase(dtype=d, **base) for base in _base_cases(full) for d in dtypes]


@dataclass
class CaseData:
    """Inputs in canonical BNSD form, already in the case dtype."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    keep: torch.Tensor  # bool, True = attend, broadcastable to [B, Nq, Sq, Skv]
    ref: torch.Tensor  # float64 reference output
    empty_rows: torch.Tensor  # [B, Nq, Sq] rows that attend nothing
    valid_rows: torch.Tensor  # [B, Nq, Sq] rows whose output is compared


def _global_spans(case: AttentionCase) -> list[tuple[int, int]]:
    """Every sample's spans as token ranges of the packed batch."""
    out, offset = [], 0
    for n, spans in zip(case.lengths_q, case.spans):
        out += [(offset + s, offset + e) for s, e in spans]
        offset += n
    return out


def case_keep_mask(case: AttentionCase) -> torch.Tensor:
    """True = attend, for the canonical tensors."""
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
    """Inputs drawn in fp32, rounded to the case dtype, and the float64 reference."""
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
